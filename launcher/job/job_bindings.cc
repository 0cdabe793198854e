// --report-bindings for the hosts that are not this machine: each agent sends its host's
// topology with its readiness (agent protocol 11), and the launcher prints that host's rows,
// planned from it as the agent will plan them, before its ranks start.
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "launcher/job/job_state.h"
#include "launcher/plan/placement_env.h"
#include "launcher/topology/topology_wire.h"

namespace hvdrun::launcher::job_detail {

void Job::report_bindings(const Host& h) {
  if (h.local || !opt_.report_bindings) return;
  const auto index = static_cast<std::size_t>(h.index);
  std::string text;
  if (index >= plan_.hosts.size() || plan_.hosts[index].name != h.name) {
    return;  // a host an elastic job grew onto: its agent places its ranks as they start
  }
  if (h.info.topology.empty()) {
    text = "host " + h.name +
           ": its agent sent no topology (it says why in its log); its "
           "ranks are placed as they start\n";
  } else {
    try {
      text = host_report(topology_from_wire(h.info.topology), plan_.hosts[index], opt_);
    } catch (const UsageError& e) {
      // Its agent refuses the same when the ranks start, and that ends the job.
      text = "host " + h.name + ": " + e.what() + "\n";
    } catch (const std::runtime_error& e) {
      text = "host " + h.name + ": its agent's topology cannot be read: " + e.what() + "\n";
    }
  }
  write_all(ctx_.stderr_fd, text.data(), text.size());
}

}  // namespace hvdrun::launcher::job_detail
