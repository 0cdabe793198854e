// Placing the hosts that are not this machine: each agent sends its host's topology with its
// readiness (agent protocol 11); the launcher plans that host's ranks from it as the agent
// will, refuses the job before any rank starts when they cannot be placed, and prints their
// rows for --report-bindings.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd.h"
#include "launcher/job/job_state.h"
#include "launcher/plan/placement_env.h"
#include "launcher/topology/topology_wire.h"

namespace hvdrun::launcher::job_detail {

// A host whose agent is ready: its ranks planned from the topology it sent, as that agent will
// plan them, and printed with --report-bindings. False when they cannot be placed: the job
// fails with the planner's message (exit 2), before any rank of any host starts, for the
// ranks wait until every host is placed (every_host_placed).
bool Job::place_host(const Host& h) {
  const auto index = static_cast<std::size_t>(h.index);
  if (h.local || !wants_topology(opt_) || index >= plan_.hosts.size() ||
      plan_.hosts[index].name != h.name) {
    return true;  // this machine was placed before the start; a grown host places its own
  }
  std::string text;
  if (h.info.topology.empty()) {
    text = "host " + h.name +
           ": its agent sent no topology (it says why in its log); its "
           "ranks are placed as they start\n";
  } else {
    try {
      text = host_report(topology_from_wire(h.info.topology), plan_.hosts[index], opt_);
    } catch (const UsageError& e) {
      fail(exit_status::kUsage, std::string("hvdrun: error: ") + e.what() + "\n", {h.name});
      return false;
    } catch (const std::runtime_error& e) {
      text = "host " + h.name + ": its agent's topology cannot be read: " + e.what() + "\n";
    }
  }
  if (opt_.report_bindings) write_all(ctx_.stderr_fd, text.data(), text.size());
  return true;
}

// Whether ranks may start: without a placement to check, at once; with one, once every host
// has answered (or is gone), so that a refusal comes before anything starts.
bool Job::every_host_placed() const {
  return !wants_topology(opt_) || std::all_of(hosts_.begin(), hosts_.end(),
                                              [](const Host& h) { return h.hello || h.closed; });
}

}  // namespace hvdrun::launcher::job_detail
