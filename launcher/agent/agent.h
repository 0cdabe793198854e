// `hvdrun agent`: the per-host process that spawns that host's ranks, relays their output
// to the launcher in frames, reports their exits, and kills them (SIGTERM, grace, SIGKILL)
// when told to, when its input reaches EOF, or when the launcher's heartbeats stop. It is
// the same code for a local host (a child of the launcher over pipes) and a remote one
// (over an SSH exec channel).
#pragma once

namespace hvdrun::launcher {

/// Runs the agent on `in_fd` (frames from the launcher) and `out_fd` (frames to it) until
/// the launcher closes the stream or a fatal error, with every rank it started gone.
/// Returns the process exit code: 0 after an orderly end, 1 after a protocol or system
/// error (reported to the launcher in a fatal frame when still possible).
int run_agent(int in_fd, int out_fd);

}  // namespace hvdrun::launcher
