// The top of a launch, whatever the hosts: make the plan, check what the launch needs,
// start every host with its launch method (host_start.h), run the job on the links they
// left, or report the hosts that failed to start.
#pragma once

#include "launcher/job/job.h"
#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// Runs the job `options` describes and returns hvdrun's exit code. The plan is made once
/// (make_plan); each launch method then starts its hosts under --start-timeout (for hosts
/// reached over SSH, the preflight checks them all in parallel and starts each one's agent
/// in the same remote shell); if any host fails, its failure goes to stderr (the preflight
/// table for SSH hosts) and 255 is returned with nothing started. Then run_job() with the
/// agents' links. Throws like run_job().
int launch(const LaunchOptions& options);

/// Same, with `hooks` for the job (their remote_link and launch_start are set here) and,
/// when `hooks.outcome` is set, the failure that decided it left there: a preflight
/// failure names the hosts that failed it.
int launch(const LaunchOptions& given, JobHooks hooks);

/// Join mode on a node other than node 0 (join_start.cc): connects to node 0 under
/// --rdzv-timeout, proves the job's secret, runs this host's agent on that connection, and
/// returns the job's exit code as node 0 sent it (255 when this node was refused, never
/// joined, or node 0 went away without a verdict), each such case said on stderr.
int run_joined_node(const LaunchOptions& options);

}  // namespace hvdrun::launcher
