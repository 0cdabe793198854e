#include "launcher/plan/elastic_hosts.h"

#include <algorithm>

#include "common/plural.h"

namespace hvdrun::launcher {

std::vector<hostfile::HostSlots> usable_hosts(
    const std::vector<hostfile::HostSlots>& discovered,
    const std::function<bool(const std::string&)>& excluded) {
  std::vector<hostfile::HostSlots> out;
  for (const auto& h : discovered) {
    if (!excluded(h.name)) out.push_back(h);
  }
  return out;
}

std::vector<HostShrink> host_shrinks(const std::vector<hostfile::HostSlots>& running,
                                     const std::vector<hostfile::HostSlots>& usable) {
  std::vector<HostShrink> out;
  for (const auto& r : running) {
    if (r.slots <= 0) continue;
    auto it = std::find_if(usable.begin(), usable.end(),
                           [&](const hostfile::HostSlots& u) { return u.name == r.name; });
    const int slots = it == usable.end() ? 0 : it->slots;
    if (r.slots <= slots) continue;
    HostShrink s{r.name, r.slots - slots, slots, ""};
    s.why = slots == 0 ? "discovery no longer lists " + r.name
                       : "discovery lists " + r.name + " with " + counted(slots, "slot") + ", " +
                             counted(r.slots, "rank") + " run there";
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hvdrun::launcher
