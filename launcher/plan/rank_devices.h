// What a rank is given on its host besides its CPUs: its slice of the host's GPUs as its own
// CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS from its bound cores, and the NIC of
// --network-interfaces as NCCL's and Gloo's interface. The agent applies them to each rank it
// starts; the launcher uses the same functions to check this machine and hostfile GPU lists
// before anything starts (placement_env.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/env_names.h"
#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"

namespace hvdrun::launcher {

/// --gpus-per-rank, as the ranks' environment carries it.
inline constexpr const char* kGpusPerRankVar = env_names::kGpusPerRank;
/// A host's GPU list from its hostfile `gpus=` (or --include's slots), comma-separated.
inline constexpr const char kHostGpusVar[] = "HVDRUN_HOST_GPUS";
/// --network-interfaces, comma-separated.
inline constexpr const char kNetworkInterfacesVar[] = "HVDRUN_NETWORK_INTERFACES";
/// A test knob: the GPU list of a host where hwloc finds none ("0,1,2,3").
inline constexpr const char kFakeGpusVar[] = "HVDRUN_FAKE_GPUS";

/// The value of NAME in a NAME=VALUE list (the last one wins, as in an environment).
std::optional<std::string> env_value(const std::vector<std::string>& env, std::string_view name);

/// `text` split at commas (empty: none).
std::vector<std::string> comma_list(const std::string& text);

/// The host's GPUs its ranks' slices come from, as CUDA_VISIBLE_DEVICES values: the
/// environment's HVDRUN_HOST_GPUS, else its CUDA_VISIBLE_DEVICES, else the topology's GPUs
/// (0 .. n-1, CUDA's numbers in PCI order), else HVDRUN_FAKE_GPUS; `from` says which.
std::vector<std::string> host_gpu_ids(const HostTopology& topology,
                                      const std::vector<std::string>& env, std::string* from);

/// `topology` with its GPUs replaced by `ids` (Gpu::name each id): a GPU whose id is the
/// number of one hwloc found keeps that GPU's PCI bus and NUMA node; others are unplaced.
HostTopology with_gpu_ids(HostTopology topology, const std::vector<std::string>& ids);

/// The first of `wanted` that `present` says this host has; throws UsageError naming the
/// host and the list when none is.
std::string pick_interface(const std::vector<std::string>& wanted, const std::string& host,
                           const std::function<bool(const std::string&)>& present);

/// --network-interfaces A,B: the names in order. Throws UsageError for an empty name or
/// one with a space or '/'.
std::vector<std::string> parse_interface_list(const std::string& text);

/// Whether this machine has a network interface of that name.
bool interface_present(const std::string& name);

/// Everything a rank gets on its host.
struct RankSetup {
  /// Its cores, CPUs, NUMA nodes, GPUs (positions in `gpu_ids`) and NIC.
  RankPlacement placed;
  /// The host's GPU list the slices come from.
  std::vector<std::string> gpu_ids;
  /// NAME=VALUE to set in its environment, over what is there.
  std::vector<std::string> env;
  /// Whether its memory is bound to its NUMA nodes: not under the default binding (first
  /// touch from its bound CPUs puts memory there anyway, and a full node must not fail a job
  /// that ran unbound before).
  bool bind_memory = true;
};

/// The setup of the rank with environment `env` on `topology` (host `host`): nullopt when
/// none of --bind-to, --gpus-per-rank, a host GPU list or --network-interfaces applies.
/// `omp_given`: the user set OMP_NUM_THREADS (then it is left alone). The NIC: the first of
/// --network-interfaces that `present` says the host has; without that list, on a host with
/// several NICs, the planner's nearest to the rank's GPU or bound NUMA node, unless
/// `nic_given` (the user named NCCL's, Gloo's or Horovod's interface: it is left alone).
/// Throws UsageError when the host cannot place the rank (plan_placement's refusals, too few
/// GPUs, none of the interfaces).
std::optional<RankSetup> rank_setup(
    const HostTopology& topology, const std::string& host, const std::vector<std::string>& env,
    bool omp_given, const std::function<bool(const std::string&)>& present = interface_present,
    bool nic_given = false);

/// The variables a rank's NIC is set in (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME,
/// HOROVOD_GLOO_IFACE): one of them set by the user turns the nearest NIC off.
inline constexpr const char* kNicVars[] = {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                           "HOROVOD_GLOO_IFACE"};

}  // namespace hvdrun::launcher
