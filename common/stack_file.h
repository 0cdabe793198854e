// The rank's stack file, shared by its writers in the rank (libhvdrun, the hvdrun Python
// package) and its reader (the rank's agent): where a stuck job is stuck
// (docs/diagnosis.md#the-stack-report). The agent names the file and the signal in the
// rank's environment, empties the file and sends the signal; the rank's handlers append
// its Python stacks (faulthandler), its native frames (a C or C++ program), the collectives
// it waits in, and last kEndLine, which tells the agent that the report is whole. And the
// words of a rank that ended a stall, after which the launcher asks the others.
#pragma once

#include <signal.h>

namespace hvdrun::stack_file {

/// The rank's stack file (in its agent's private directory, mode 0600).
inline constexpr const char kFileEnv[] = "HVDRUN_STACK_FILE";
/// The signal that asks for the report, as a number (SIGRTMIN+kSignalOffset).
inline constexpr const char kSignalEnv[] = "HVDRUN_STACK_SIGNAL";
/// A real-time signal: never SIGUSR1/2 (the program's own), never SIGQUIT (a terminal's).
inline constexpr int kSignalOffset = 5;
inline int signal_number() { return SIGRTMIN + kSignalOffset; }

/// One line per collective the rank waits in: "hvdrun-wait: allreduce 'x' float32[4] 61 s".
inline constexpr const char kWaitPrefix[] = "hvdrun-wait: ";
/// The line that says the rank waits in no collective (or has not joined a job).
inline constexpr const char kNoWait[] = "hvdrun-wait: none";
/// Precedes the native frames of the thread the signal reached.
inline constexpr const char kNativeLine[] = "hvdrun-native-frames:";
/// The last line of a whole report.
inline constexpr const char kEndLine[] = "hvdrun-stacks-end";

/// In the last stderr lines of a rank that ended itself past
/// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: the launcher gathers the others' reports first.
inline constexpr const char kStallShutdown[] =
    "Ending this rank: HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=";

}  // namespace hvdrun::stack_file
