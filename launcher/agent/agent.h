// `hvdrun agent`: the per-host process that spawns that host's ranks, relays their output
// to the launcher in frames, reports their exits, and kills them (SIGTERM, grace, SIGKILL)
// when told to, when its input reaches EOF, or when the launcher's heartbeats stop. It is
// the same code for a local host (a child of the launcher over pipes) and a remote one
// (over an SSH exec channel).
#pragma once

#include <string>

namespace hvdrun::launcher {

/// The job's verdict as the launcher sent it to a joined node's agent (join mode).
struct JobVerdict {
  bool known = false;      ///< false: the launcher closed the stream without one
  int exit_code = 0;       ///< the launcher's exit code
  std::string message;     ///< its failure report, or empty
  bool this_host = false;  ///< the report names this host
};

/// Runs the agent on `in_fd` (frames from the launcher) and `out_fd` (frames to it) until
/// the launcher closes the stream or a fatal error, with every rank it started gone.
/// Returns the process exit code: 0 after an orderly end, 1 after a protocol or system
/// error (reported to the launcher in a fatal frame when still possible).
int run_agent(int in_fd, int out_fd);

/// run_agent(), which also leaves the job's verdict in `verdict` when the launcher sent
/// one before closing the stream.
int run_agent(int in_fd, int out_fd, JobVerdict* verdict);

}  // namespace hvdrun::launcher
