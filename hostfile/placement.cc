// Rank placement: fills hosts in the order given and computes Horovod's coordinates.
// cross_rank/cross_size follow Horovod: ranks with the same local_rank form a "cross"
// communicator across hosts, ordered by host.
#include "hostfile/placement.h"

#include <string>
#include <utility>

#include "common/env_names.h"
#include "common/error.h"

namespace hvdrun::hostfile {
namespace {

// An upper bound on ranks per job, so that a typo fails with a message instead of
// allocating gigabytes; the runtime accepts the same.
constexpr long long kMaxRanks = env_names::kMaxRanks;

std::string display(const std::string& name) {
  if (name.find(':') != std::string::npos) return "[" + name + "]";
  return name;
}

// "localhost:4, node1:4" — at most a handful, then a count of the rest.
std::string list_slots(const std::vector<HostSlots>& hosts) {
  constexpr size_t kMaxListed = 8;
  std::string out;
  for (size_t i = 0; i < hosts.size() && i < kMaxListed; ++i) {
    if (i) out += ", ";
    out += display(hosts[i].name) + ":" + std::to_string(hosts[i].slots);
  }
  if (hosts.size() > kMaxListed) {
    out += ", and " + std::to_string(hosts.size() - kMaxListed) + " more hosts";
  }
  return out;
}

}  // namespace

int ranks_wanted(const std::vector<HostSlots>& hosts, std::optional<int> np) {
  if (hosts.empty()) {
    throw UsageError("no hosts to place ranks on; expected -H host[:slots],... or --hostfile FILE");
  }
  long long total = 0;
  for (const auto& h : hosts) {
    if (h.slots < 1) {
      throw UsageError("host '" + h.name + "' has " + std::to_string(h.slots) +
                       " slots; expected at least 1");
    }
    total += h.slots;
  }
  if (np && *np < 1) {
    throw UsageError("-np " + std::to_string(*np) +
                     " is not a positive number of processes; expected -np N with N >= 1");
  }
  long long wanted = np ? *np : total;
  if (wanted > total) {
    throw UsageError("-np " + std::to_string(wanted) + " but the hosts have " +
                     std::to_string(total) + (total == 1 ? " slot (" : " slots (") +
                     list_slots(hosts) + "); lower -np or add slots");
  }
  if (wanted > kMaxRanks) {
    throw UsageError(std::to_string(wanted) + " ranks requested; at most " +
                     std::to_string(kMaxRanks) + " are supported, lower -np or the slots");
  }
  return static_cast<int>(wanted);
}

Placement place(const std::vector<HostSlots>& hosts, std::optional<int> np) {
  const int wanted = ranks_wanted(hosts, np);
  Placement p;
  p.ranks.reserve(static_cast<size_t>(wanted));
  // max_local = the largest local_size, which bounds the cross communicators.
  int max_local = 0;
  int remaining = wanted;
  for (const auto& h : hosts) {
    if (remaining == 0) break;
    int n = remaining < h.slots ? remaining : h.slots;
    HostSlots placed = h;
    placed.slots = n;
    p.hosts.push_back(std::move(placed));
    if (n > max_local) max_local = n;
    remaining -= n;
  }
  // Hosts are filled in order, so local sizes never increase from one host to the next:
  // every host but the last is full. cross_size for local rank l is the number of hosts
  // whose local_size exceeds l; computed generally anyway.
  std::vector<int> cross_size(static_cast<size_t>(max_local), 0);
  for (const auto& h : p.hosts) {
    for (int l = 0; l < h.slots; ++l) ++cross_size[static_cast<size_t>(l)];
  }
  std::vector<int> cross_next(static_cast<size_t>(max_local), 0);
  int rank = 0;
  for (size_t hi = 0; hi < p.hosts.size(); ++hi) {
    const int local_size = p.hosts[hi].slots;
    for (int l = 0; l < local_size; ++l) {
      RankSlot r;
      r.rank = rank++;
      r.host_index = static_cast<int>(hi);
      r.local_rank = l;
      r.local_size = local_size;
      r.cross_rank = cross_next[static_cast<size_t>(l)]++;
      r.cross_size = cross_size[static_cast<size_t>(l)];
      p.ranks.push_back(r);
    }
  }
  return p;
}

}  // namespace hvdrun::hostfile
