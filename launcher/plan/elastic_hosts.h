// What an elastic job may run on, as pure functions the job loop and its tests share: the
// usable hosts (discovery's latest answer minus the hosts cooling down after a failure),
// and the hosts whose running processes must leave the job because discovery no longer
// lists them, or lists them with fewer slots (docs/elastic.md, "A host leaves the job").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hostfile/hosts.h"

namespace hvdrun::launcher {

/// The hosts a job may use now: `discovered` (discovery's latest answer, in its order)
/// without the hosts `excluded` names. Nothing else counts: a host back from its cooldown
/// is usable whatever else changed in the same answer.
std::vector<hostfile::HostSlots> usable_hosts(
    const std::vector<hostfile::HostSlots>& discovered,
    const std::function<bool(const std::string&)>& excluded);

/// A host that runs more of the job's processes than the usable hosts allow it.
struct HostShrink {
  /// The host, as the job names it.
  std::string host;
  /// How many of its running processes leave the job.
  int leaving = 0;
  /// The slots it still has (0: it is not usable at all).
  int slots = 0;
  /// Why, for the launcher's log line: "discovery no longer lists node3", or "discovery
  /// lists node3 with 1 slot, 2 ranks run there".
  std::string why;
  bool operator==(const HostShrink&) const = default;
};

/// The hosts of `running` (each host with the number of the job's processes running
/// there, in the job's order) that have more processes than `usable` gives them slots,
/// in that order.
std::vector<HostShrink> host_shrinks(const std::vector<hostfile::HostSlots>& running,
                                     const std::vector<hostfile::HostSlots>& usable);

}  // namespace hvdrun::launcher
