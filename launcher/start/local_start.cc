// The local method: hosts that are this machine. Their agents are children of the
// launcher that the job itself starts when it opens their links (start_local_agent, or
// JobTestHooks::local_link), after its servers are up; there is nothing to log in to or check
// before, so this start only vouches for them.
#include "launcher/start/host_start.h"

namespace hvdrun::launcher {

namespace {

class LocalStarter final : public HostStarter {
 public:
  void start(const StartContext& /*context*/, const std::vector<const PlannedHost*>& /*hosts*/,
             StartTable& /*table*/) override {}
};

}  // namespace

std::unique_ptr<HostStarter> make_local_starter() { return std::make_unique<LocalStarter>(); }

}  // namespace hvdrun::launcher
