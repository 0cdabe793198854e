// --dry-run: what a command line or an allocation would do, printed without contacting
// any host: the launch method and the host source, then one line per rank.
#pragma once

#include <string>

#include "launcher/plan/launch_plan.h"

namespace hvdrun::launcher {

/// The plan as text: `launcher: METHOD; hosts from SOURCE`, then `RANK HOST LOCAL_RANK`
/// per rank.
std::string render_dry_run(const LaunchPlan& plan);

/// The same as one JSON object: {"launcher", "source", "hosts": [{"host", "slots",
/// "method"}], "ranks": [{"rank", "host", "local_rank"}]}.
std::string render_dry_run_json(const LaunchPlan& plan);

}  // namespace hvdrun::launcher
