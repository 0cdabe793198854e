// Binding ranks on the hosts that run them: the policy travels in every rank's environment
// (HVDRUN_BIND_TO, HVDRUN_MAP_BY, HVDRUN_CPUS_PER_RANK, HVDRUN_GPUS_PER_RANK and the
// variables of rank_devices.h), each agent plans its own host from its own topology
// (launcher/topology/placement.h) and binds the child before exec; the
// launcher plans this machine's ranks first, so that a refusal comes before anything
// starts, and prints them for --report-bindings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/env_names.h"
#include "launcher/plan/launch_plan.h"
#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"

namespace hvdrun::launcher {

/// The variables that carry the policy to the agents.
inline constexpr const char* kBindToVar = env_names::kBindTo;
inline constexpr const char kMapByVar[] = "HVDRUN_MAP_BY";
inline constexpr const char kCpusPerRankVar[] = "HVDRUN_CPUS_PER_RANK";
/// Its value for kEqualShare.
inline constexpr const char kEqualShareWord[] = "share";

/// NAME=VALUE for each of them (with --bind-to none, none of them), and
/// HVDRUN_GPUS_PER_RANK with --gpus-per-rank.
std::vector<std::string> placement_env(const PlacementPolicy& policy);

/// The policy a rank's environment carries; nullopt when it neither binds nor gives GPUs.
/// Throws UsageError for a value that is not one of the words or numbers.
std::optional<PlacementPolicy> policy_from_env(const std::vector<std::string>& env);

/// This process's environment, NAME=VALUE each.
std::vector<std::string> process_env();

/// Slurm's --cpus-per-task as salloc and sbatch pass it to the programs of the allocation.
inline constexpr const char kSlurmCpusPerTaskVar[] = "SLURM_CPUS_PER_TASK";

/// Whether a launch binds each rank to an equal share of its node's CPUs: inside a Slurm
/// allocation (agents started by srun) with --cpus-per-task (SLURM_CPUS_PER_TASK in
/// `launcher_env`) and neither --bind-to nor --gpus-per-rank given.
bool slurm_equal_share(const LaunchPlan& plan, const LaunchOptions& options,
                       const std::vector<std::string>& launcher_env);

/// The options a launch runs with: under slurm_equal_share, --bind-to core with an equal
/// share of cores (kEqualShare) each; with a policy that binds or gives GPUs, with
/// --network-interfaces or a host's GPU list, checks the hosts that are this machine against
/// its topology and the hosts with a hostfile GPU list against it (UsageError before
/// anything starts) and adds the variables the agents apply to the ranks' (-x). With
/// --report-bindings, writes the table of render_bindings for this machine's ranks to
/// `report` first. `topology` is read only when needed; `launcher_env` is this process's
/// environment (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, HVDRUN_FAKE_GPUS).
LaunchOptions with_placement(const LaunchPlan& plan, const LaunchOptions& options,
                             std::string& report,
                             const std::function<HostTopology()>& topology = load_host_topology,
                             const std::vector<std::string>& launcher_env = process_env());

/// Whether the agents send their host's topology with their readiness: a launch that binds,
/// gives GPUs, names NICs or reports bindings.
bool wants_topology(const LaunchOptions& options);

/// Where each rank of one host runs.
struct HostBindings {
  /// Its ranks in local-rank order: cores, CPUs, NUMA nodes, GPUs (positions in gpu_ids
  /// when that is given) and NIC.
  std::vector<RankPlacement> ranks;
  /// The host's GPU list the ranks' slices come from (CUDA_VISIBLE_DEVICES values); empty
  /// when no GPU is given out.
  std::vector<std::string> gpu_ids;
};

/// The ranks of host `h` on `t`, each set up as its agent will set it up with `placed`'s
/// options (with_placement's) and the environment `launcher_env` (this process's for this
/// machine, none for another host); `present` says whether the host has an interface.
/// Throws UsageError as that agent will refuse.
HostBindings host_bindings(const HostTopology& t, const PlannedHost& h, const LaunchOptions& placed,
                           const std::vector<std::string>& launcher_env,
                           const std::function<bool(const std::string&)>& present);

/// host_bindings for a host that is not this machine, from the topology its agent sent (or
/// its probe printed): its interfaces are the ones that topology lists.
HostBindings remote_bindings(const HostTopology& topology, const PlannedHost& h,
                             const LaunchOptions& placed);

/// The rows of --report-bindings for host `h`, which is not this machine, planned from
/// `topology`, the one its agent sent, with `placed`'s policy (with_placement's options) as
/// its agent will plan them. Throws UsageError as that agent will refuse.
std::string host_report(const HostTopology& topology, const PlannedHost& h,
                        const LaunchOptions& placed);

/// The lines that say what hvdrun chose for the ranks (`options` as with_placement returned
/// them): the equal share inside Slurm, and OMP_NUM_THREADS in bound ranks (a policy that
/// binds and no OMP_NUM_THREADS in `launcher_env` or -x). Empty when neither.
std::string omp_note(const LaunchOptions& options, const std::vector<std::string>& launcher_env);

/// The table of --report-bindings: RANK, HOST, LOCAL, CORES, CPUS, NUMA, GPU, NIC, one row
/// per rank ("unbound" and "-" where nothing is bound or chosen); the GPU column shows
/// `gpu_ids` at each rank's GPU positions when given (CUDA_VISIBLE_DEVICES values).
std::string render_bindings(const std::string& host, const std::vector<RankPlacement>& ranks,
                            const std::vector<std::string>& gpu_ids = {});

/// The whole number NAME=N in a NAME=VALUE list (the last one wins), `fallback` when there
/// is none. Throws UsageError when N is not a whole number (0 to 2^20).
int env_number(const std::vector<std::string>& env, const char* name, int fallback);

/// `items` joined with commas ("0,2,4"), as the GPU and interface lists are written.
std::string comma_joined(const std::vector<std::string>& items);

}  // namespace hvdrun::launcher
