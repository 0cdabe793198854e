// Rank placement: ranks fill hosts in the order given, as horovodrun does, and each rank
// gets the local/cross coordinates Horovod defines.
#pragma once

#include <optional>
#include <vector>

#include "hostfile/hosts.h"

namespace hvdrun::hostfile {

/// Where one rank runs and its coordinates.
struct RankSlot {
  int rank = 0;
  /// Index into Placement::hosts.
  int host_index = 0;
  int local_rank = 0;
  int local_size = 0;
  /// Index of this rank's host among the hosts that have a rank with this local_rank.
  int cross_rank = 0;
  /// Number of hosts that have a rank with this local_rank.
  int cross_size = 0;
};

/// The whole job's placement.
struct Placement {
  /// Hosts that received at least one rank, in the order given; `slots` is the number of
  /// ranks placed there.
  std::vector<HostSlots> hosts;
  /// One entry per rank, indexed by rank.
  std::vector<RankSlot> ranks;

  int size() const { return static_cast<int>(ranks.size()); }
};

/// The number of ranks `np` asks for on `hosts` (all slots when `np` is empty), checked
/// without placing them: the errors of place(). The command line calls it to reject bad
/// input before anything starts; the launch plan then places the ranks, once.
int ranks_wanted(const std::vector<HostSlots>& hosts, std::optional<int> np);

/// Places `np` ranks (all slots when `np` is empty) on `hosts`. Errors (UsageError):
/// np < 1, np greater than the total slots (the message lists the slots), empty host list.
Placement place(const std::vector<HostSlots>& hosts, std::optional<int> np);

}  // namespace hvdrun::hostfile
