// hvdrun's exit statuses: the one table of the launcher's contract with whoever started it.
// The launcher (launch, job, elastic, check, agent) and main name these, never the numbers.
// Users read the same table in the man page's EXIT STATUS section (tests/cli/man_help_test.cc
// checks that it lists every status below); docs/usage.md points there.
#pragma once

#include <csignal>

namespace hvdrun::exit_status {

/// Every rank exited 0 (also --help, --version, --dry-run, and a check that found every
/// host ready).
inline constexpr int kOk = 0;

/// Bad usage or input, found before anything started: an unknown or malformed option, a
/// bad host list, srun starting hvdrun once per task, an open-file limit too low.
inline constexpr int kUsage = 2;

/// A host failed the preflight or the launch failed (an agent or a server did not start, a
/// host was lost), or hvdrun was stopped longer than the heartbeat timeout: ssh's
/// convention for "the connection, not the command, failed".
inline constexpr int kLaunchFailed = 255;

/// The job ran past --timeout and hvdrun tore it down: GNU timeout's code for a command
/// stopped at its time limit, so that scripts that already know it read it the same way.
/// No hvdrun status is 124 otherwise (a rank's own 124 is indistinguishable, as with timeout).
inline constexpr int kTimedOut = 124;

/// `hvdrun agent` (started by the launcher, never by users) failed on its own.
inline constexpr int kAgentFailed = 1;

/// The status of a process ended by signal `sig`, as shells report it: a rank killed by a
/// signal, or hvdrun itself stopping its job on SIGINT (130), SIGPIPE (141) or SIGTERM (143).
/// A rank that exits with N gives N.
constexpr int for_signal(int sig) { return 128 + sig; }

/// The statuses the man page documents by number (a rank's own status aside).
inline constexpr int kDocumented[] = {
    kOk,           kUsage,   for_signal(SIGINT), for_signal(SIGPIPE), for_signal(SIGTERM),
    kLaunchFailed, kTimedOut};

}  // namespace hvdrun::exit_status
