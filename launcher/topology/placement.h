// The placement planner: where each rank of one host runs. A pure function from the host's
// topology (topology.h), the ranks it holds and a policy (--bind-to, --map-by,
// --cpus-per-rank, GPUs per rank) to every local rank's CPUs, NUMA nodes, GPUs and NIC, with
// mpirun's meaning for the words (docs/placement.md). What cannot be placed as asked is
// refused with the host and the numbers, never left silently unbound.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/topology/topology.h"

namespace hvdrun::launcher {

/// --bind-to: the CPUs a rank may run on, grown from the cores it was mapped to.
enum class BindTo {
  none,   ///< not bound: every allowed CPU, no memory policy
  core,   ///< its own cores' hardware threads
  l3,     ///< every core sharing an L3 cache with its cores
  numa,   ///< every core of its NUMA node
  socket  ///< every core of its package
};

/// --map-by: the order in which ranks take cores.
enum class MapBy {
  slot,   ///< in core order: local rank r takes the next cpus-per-rank cores
  numa,   ///< NUMA node by NUMA node, round-robin (or its GPU's node, when it has GPUs)
  socket  ///< package by package, round-robin (or its GPU's package, when it has GPUs)
};

/// PlacementPolicy::cpus_per_rank for an equal share of the host's allowed cores: its
/// allowed cores divided by its ranks; on a host with fewer allowed cores than ranks, no
/// binding (inside Slurm with --cpus-per-task, the default: the CPUs the allocation gives a
/// node, split among its ranks).
inline constexpr int kEqualShare = -1;

/// How ranks are placed on a host.
struct PlacementPolicy {
  /// --bind-to (default none: today's behaviour).
  BindTo bind_to = BindTo::none;
  /// --map-by (default slot).
  MapBy map_by = MapBy::slot;
  /// --cpus-per-rank: cores each rank is mapped to (1 or more), or kEqualShare.
  int cpus_per_rank = 1;
  /// GPUs each rank gets (0: none assigned).
  int gpus_per_rank = 0;
};

/// Where one rank runs.
struct RankPlacement {
  /// The rank in the job and on its host.
  int rank = 0;
  int local_rank = 0;
  /// The cores it was mapped to (Core::index); empty when not bound.
  std::vector<int> cores;
  /// The CPUs (kernel numbers) it is bound to, ascending; empty when not bound.
  std::vector<int> cpus;
  /// The NUMA nodes (kernel numbers) of those CPUs: its memory's nodes; empty when not bound.
  std::vector<int> numa;
  /// Its GPUs (Gpu::index); empty when none were asked for.
  std::vector<int> gpus;
  /// The NIC nearest its GPU, else its NUMA node, else its package; empty when the host
  /// has none.
  std::string nic;
};

/// Places `ranks` (the job ranks of host `host`, in local-rank order) on `topology`.
/// Throws UsageError naming the host and the numbers when the policy cannot be met: fewer
/// allowed cores than ranks x cpus-per-rank, fewer GPUs than ranks x GPUs per rank, no
/// domain with room for a rank's cores, a NUMA node without memory (or, near a GPU,
/// without cores) when binding to numa, a bad cpus-per-rank or GPU count.
std::vector<RankPlacement> plan_placement(const HostTopology& topology, const std::string& host,
                                          const std::vector<int>& ranks,
                                          const PlacementPolicy& asked);

/// The word for each value, as the flags spell them.
std::string_view to_string(BindTo b);
std::string_view to_string(MapBy m);

/// The value a word names; nullopt for none.
std::optional<BindTo> parse_bind_to(std::string_view word);
std::optional<MapBy> parse_map_by(std::string_view word);

}  // namespace hvdrun::launcher
