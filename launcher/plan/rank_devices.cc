// GPU slices, OMP_NUM_THREADS and the NIC of --network-interfaces for each rank
// (rank_devices.h; docs/placement.md).
#include "launcher/plan/rank_devices.h"

#include <net/if.h>

#include <algorithm>
#include <optional>

#include "common/env_names.h"
#include "common/error.h"
#include "common/quote.h"
#include "common/whole_number.h"
#include "launcher/plan/placement_env.h"

namespace hvdrun::launcher {
namespace {

// The cores with a hardware thread among `cpus`: what OMP_NUM_THREADS counts.
int cores_of(const HostTopology& t, const std::vector<int>& cpus) {
  return static_cast<int>(std::count_if(t.cores.begin(), t.cores.end(), [&](const Core& c) {
    return std::any_of(c.pus.begin(), c.pus.end(),
                       [&](int pu) { return std::binary_search(cpus.begin(), cpus.end(), pu); });
  }));
}

// The GPUs of a rank as CUDA_VISIBLE_DEVICES values.
std::string visible_devices(const RankSetup& s) {
  std::vector<std::string> ids;
  for (int g : s.placed.gpus) ids.push_back(s.gpu_ids[static_cast<std::size_t>(g)]);
  return comma_joined(ids);
}

}  // namespace

std::optional<std::string> env_value(const std::vector<std::string>& env, std::string_view name) {
  std::optional<std::string> out;
  for (const auto& e : env) {
    if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=') {
      out = e.substr(name.size() + 1);
    }
  }
  return out;
}

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> host_gpu_ids(const HostTopology& topology,
                                      const std::vector<std::string>& env, std::string* from) {
  auto said = [from](const char* where) {
    if (from != nullptr) *from = where;
  };
  for (const char* name : {kHostGpusVar, "CUDA_VISIBLE_DEVICES"}) {
    if (const auto v = env_value(env, name)) {
      said(name == kHostGpusVar ? "the hostfile's gpus=" : "CUDA_VISIBLE_DEVICES");
      return comma_list(*v);
    }
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < topology.gpus.size(); ++i) out.push_back(std::to_string(i));
  if (!out.empty()) {
    said("hwloc");
    return out;
  }
  said(kFakeGpusVar);
  if (const auto v = env_value(env, kFakeGpusVar)) return comma_list(*v);
  said("hwloc");
  return out;
}

HostTopology with_gpu_ids(HostTopology topology, const std::vector<std::string>& ids) {
  std::vector<Gpu> gpus;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    Gpu g;
    const auto n = parse_whole_number(ids[i], 0, 1 << 20);
    if (n && static_cast<std::size_t>(*n) < topology.gpus.size()) {
      g = topology.gpus[static_cast<std::size_t>(*n)];
    }
    g.index = static_cast<int>(i);
    g.name = ids[i];
    gpus.push_back(std::move(g));
  }
  topology.gpus = std::move(gpus);
  return topology;
}

std::vector<std::string> parse_interface_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    if (name.empty() || name.find_first_of(" \t\n/") != std::string::npos) {
      throw UsageError("bad value " + quote(text) +
                       " for --network-interfaces; expected interface names separated by commas, "
                       "as ib0,eth0");
    }
    out.push_back(name);
    start = comma + 1;
  }
  return out;
}

bool interface_present(const std::string& name) { return ::if_nametoindex(name.c_str()) != 0; }

std::string pick_interface(const std::vector<std::string>& wanted, const std::string& host,
                           const std::function<bool(const std::string&)>& present) {
  for (const auto& name : wanted) {
    if (present(name)) return name;
  }
  throw UsageError("host " + host + " has none of the interfaces of --network-interfaces " +
                   comma_joined(wanted) + "; add one it has (`ip -br link` there lists them)");
}

namespace {

// The default binding (docs/placement.md): with GPUs given out and no --bind-to, every
// rank of the host bound to the NUMA node of its first GPU, when hwloc knows each GPU's node
// and the planner can place them there; otherwise nullopt (unbound, as before).
std::optional<std::vector<RankPlacement>> default_binding(const HostTopology& t,
                                                          const std::string& host,
                                                          const std::vector<int>& ranks,
                                                          const PlacementPolicy& p,
                                                          const std::vector<std::string>& env) {
  if (p.bind_to != BindTo::none || p.gpus_per_rank == 0 || env_value(env, kBindToVar)) {
    return std::nullopt;
  }
  const auto needed = ranks.size() * static_cast<std::size_t>(p.gpus_per_rank);
  if (needed > t.gpus.size()) return std::nullopt;  // the plain plan refuses it with the numbers
  for (std::size_t g = 0; g < needed; ++g) {
    if (t.gpus[g].numa < 0) return std::nullopt;
  }
  try {
    return plan_placement(t, host, ranks, {BindTo::numa, MapBy::numa, 1, p.gpus_per_rank});
  } catch (const UsageError&) {
    return std::nullopt;  // a default never refuses what the unbound plan allows
  }
}

}  // namespace

std::optional<RankSetup> rank_setup(const HostTopology& topology, const std::string& host,
                                    const std::vector<std::string>& env, bool omp_given,
                                    const std::function<bool(const std::string&)>& present,
                                    bool nic_given) {
  const auto policy = policy_from_env(env);
  const auto host_gpus = env_value(env, kHostGpusVar);
  const std::vector<std::string> wanted =
      comma_list(env_value(env, kNetworkInterfacesVar).value_or(""));
  if (!policy && !host_gpus && wanted.empty()) return std::nullopt;
  const PlacementPolicy p = policy.value_or(PlacementPolicy{});
  RankSetup out;
  std::string from;
  if (p.gpus_per_rank > 0) out.gpu_ids = host_gpu_ids(topology, env, &from);
  const HostTopology here = p.gpus_per_rank > 0 ? with_gpu_ids(topology, out.gpu_ids) : topology;
  const int local_size = env_number(env, env_names::kLocalSize, 1);
  const int local_rank = env_number(env, env_names::kLocalRank, 0);
  if (local_rank >= local_size) {
    throw UsageError("local rank " + std::to_string(local_rank) + " of " +
                     std::to_string(local_size) + " cannot be placed");
  }
  std::vector<int> ranks(static_cast<std::size_t>(local_size));
  for (int i = 0; i < local_size; ++i) ranks[static_cast<std::size_t>(i)] = i;
  try {
    const auto near = default_binding(here, host, ranks, p, env);
    out.placed = near ? (*near)[static_cast<std::size_t>(local_rank)]
                      : plan_placement(here, host, ranks, p)[static_cast<std::size_t>(local_rank)];
    omp_given = omp_given || near.has_value();
    out.bind_memory = !near.has_value();
  } catch (const UsageError& e) {
    if (p.gpus_per_rank == 0) throw;
    // The planner's refusal, with where the GPUs were counted.
    throw UsageError(std::string(e.what()) + " (GPUs from " + from + ": " +
                     (out.gpu_ids.empty() ? "none" : comma_joined(out.gpu_ids)) + ")");
  }
  if (p.gpus_per_rank > 0) {
    out.env.push_back("CUDA_VISIBLE_DEVICES=" + visible_devices(out));
    // hwloc's numbers are the PCI order; CUDA's are only with this (its default is
    // fastest first).
    if (from == "hwloc" && !env_value(env, "CUDA_DEVICE_ORDER")) {
      out.env.emplace_back("CUDA_DEVICE_ORDER=PCI_BUS_ID");
    }
  } else if (host_gpus) {
    out.env.push_back("CUDA_VISIBLE_DEVICES=" + *host_gpus);
  }
  if (!out.placed.cpus.empty() && !omp_given) {
    out.env.push_back("OMP_NUM_THREADS=" + std::to_string(cores_of(topology, out.placed.cpus)));
  }
  // The NIC nearest the rank's GPU or bound node, where a host has several to choose from
  // and the user named none (--network-interfaces, --network-interface, -x or the shell).
  const bool placed_near = !out.placed.gpus.empty() || !out.placed.cpus.empty();
  const bool nearest = wanted.empty() && !nic_given && topology.nics.size() > 1 && placed_near &&
                       !out.placed.nic.empty() && present(out.placed.nic);
  if (!wanted.empty()) out.placed.nic = pick_interface(wanted, host, present);
  if (!wanted.empty() || nearest) {
    for (const char* name : kNicVars) {
      out.env.push_back(std::string(name) + "=" + out.placed.nic);
    }
  }
  return out;
}

}  // namespace hvdrun::launcher
