// The slurm method: one `hvdrun agent` per node from a single srun step
// (slurm_launch.h), each connected back to the launcher.
#include "launcher/start/host_start.h"

#include "common/error.h"
#include "launcher/hosts/slurm_launch.h"
#include "launcher/plan/local_host.h"

namespace hvdrun::launcher {

namespace {

class SlurmStarter final : public HostStarter {
 public:
  void start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
             StartTable& table) override {
    SlurmStepSpec step;
    for (const PlannedHost* h : hosts) step.nodes.push_back(h->name);
    step.remote_hvdrun = expected_remote_hvdrun(context.options, PreflightSettings{});
    if (!context.options.network_interface.empty()) {
      step.bind_address = interface_address(context.options.network_interface);
    }
    step.deadline = context.deadline;
    try {
      for (auto& [node, link] : start_slurm_agents(step)) table.links[node] = std::move(link);
    } catch (const LaunchError& e) {
      table.unreachable.emplace_back(e.what());
    }
  }
};

}  // namespace

std::unique_ptr<HostStarter> make_slurm_starter() { return std::make_unique<SlurmStarter>(); }

}  // namespace hvdrun::launcher
