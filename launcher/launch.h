// The top of a launch, whatever the hosts: make the plan, preflight the hosts reached over
// SSH, then run the job with an agent link per host.
#pragma once

#include "launcher/job.h"
#include "launcher/launch_options.h"

namespace hvdrun::launcher {

/// Runs the job `options` describes and returns hvdrun's exit code. The plan is made once
/// (make_plan); when it has hosts reached over SSH, the preflight checks them all in
/// parallel under --start-timeout and starts each one's agent in the same remote shell; if
/// any host fails it, the preflight table goes to stderr and 255 is returned with nothing
/// started. Then run_job() with those agents. Throws like run_job().
int launch(const LaunchOptions& options);

/// Same, with `hooks` for the job (their remote_link and launch_start are set here) and,
/// when `hooks.outcome` is set, the failure that decided it left there: a preflight
/// failure names the hosts that failed it.
int launch(const LaunchOptions& options, JobHooks hooks);

}  // namespace hvdrun::launcher
