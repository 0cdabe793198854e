// The placement planner: mapping ranks to cores by domain, growing each rank's cores into
// its binding, and choosing its GPUs and NIC (docs/placement.md has the rules and a picture).
#include "launcher/topology/placement.h"

#include <algorithm>
#include <set>

#include "common/error.h"

namespace hvdrun::launcher {
namespace {

// A domain ranks are mapped into: positions in HostTopology::cores, in core order.
struct Domain {
  int id = -1;  // NUMA node or package number; -1 for the whole host (--map-by slot)
  std::vector<std::size_t> cores;
};

std::string numbers(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "NUMA node 3", "package 1": a domain of --map-by as the user knows it.
std::string domain_name(MapBy m, int id) {
  return (m == MapBy::numa ? "NUMA node " : "package ") + std::to_string(id);
}

[[noreturn]] void refuse(const std::string& host, const std::string& what) {
  throw UsageError("host " + host + ": " + what);
}

// The domains of --map-by: the whole host, each NUMA node with cores, or each package.
std::vector<Domain> domains(const HostTopology& t, MapBy map_by) {
  std::vector<Domain> out;
  for (std::size_t i = 0; i < t.cores.size(); ++i) {
    const Core& c = t.cores[i];
    const int id = map_by == MapBy::slot ? -1 : map_by == MapBy::numa ? c.numa : c.package;
    auto it = std::find_if(out.begin(), out.end(), [&](const Domain& d) { return d.id == id; });
    if (it == out.end()) it = out.insert(out.end(), Domain{id, {}});
    it->cores.push_back(i);
  }
  std::sort(out.begin(), out.end(), [](const Domain& a, const Domain& b) { return a.id < b.id; });
  return out;
}

// The domain a rank with these GPUs belongs to under --map-by numa or socket: its first
// GPU's NUMA node or package; -1 when it has none or the GPU's place is unknown.
int gpu_domain(const HostTopology& t, MapBy map_by, const std::vector<int>& gpus) {
  if (gpus.empty() || map_by == MapBy::slot) return -1;
  const int numa = t.gpus[static_cast<std::size_t>(gpus.front())].numa;
  if (map_by == MapBy::numa) return numa;
  const NumaNode* node = t.numa(numa);
  return node == nullptr ? -1 : node->package;
}

std::vector<std::size_t> take_free(const Domain& d, std::vector<bool>& used, int count) {
  std::vector<std::size_t> out;
  for (std::size_t i : d.cores) {
    if (static_cast<int>(out.size()) == count) break;
    if (!used[i]) out.push_back(i);
  }
  if (static_cast<int>(out.size()) < count) return {};
  for (std::size_t i : out) used[i] = true;
  return out;
}

// Maps every rank to cpus-per-rank cores: its GPU's domain when it has one there, else the
// domains round-robin from rank % domains, the first with room.
std::vector<std::vector<std::size_t>> map_cores(const HostTopology& t, const std::string& host,
                                                const PlacementPolicy& p,
                                                const std::vector<std::vector<int>>& gpus) {
  const std::size_t n = gpus.size();
  const auto per = static_cast<std::size_t>(p.cpus_per_rank);
  if (n * per > t.cores.size()) {
    refuse(host, numbers(n, "rank", "ranks") + " x " + numbers(per, "core", "cores") +
                     " per rank need " + std::to_string(n * per) + " cores, and " +
                     numbers(t.cores.size(), "core is", "cores are") +
                     " allowed here; lower -np or --cpus-per-rank, or use --bind-to none");
  }
  const std::vector<Domain> ds = domains(t, p.map_by);
  std::vector<bool> used(t.cores.size(), false);
  std::vector<std::vector<std::size_t>> out(n);
  for (std::size_t r = 0; r < n; ++r) {
    const int near = gpu_domain(t, p.map_by, gpus[r]);
    auto home = std::find_if(ds.begin(), ds.end(), [&](const Domain& d) { return d.id == near; });
    if (near >= 0 && home != ds.end()) {
      out[r] = take_free(*home, used, p.cpus_per_rank);
      if (out[r].empty()) {
        refuse(host, "local rank " + std::to_string(r) + "'s GPU " +
                         std::to_string(gpus[r].front()) + " is near " +
                         domain_name(p.map_by, near) + ", which has no " +
                         numbers(per, "free core", "free cores") +
                         " left for it; use --map-by slot or fewer --cpus-per-rank");
      }
      continue;
    }
    for (std::size_t k = 0; k < ds.size() && out[r].empty(); ++k) {
      out[r] = take_free(ds[(r + k) % ds.size()], used, p.cpus_per_rank);
    }
    if (out[r].empty()) {
      refuse(host, std::string("no ") + (p.map_by == MapBy::numa ? "NUMA node" : "package") +
                       " has " + numbers(per, "free core", "free cores") + " left for local rank " +
                       std::to_string(r) + "; use --map-by slot or fewer --cpus-per-rank");
    }
  }
  return out;
}

// The CPUs a rank is bound to: the PUs of every core that shares the --bind-to level with one
// of its own cores.
std::vector<int> bound_cpus(const HostTopology& t, BindTo bind,
                            const std::vector<std::size_t>& mine) {
  auto level = [bind](const Core& c) {
    switch (bind) {
      case BindTo::l3:
        return c.l3;
      case BindTo::numa:
        return c.numa;
      case BindTo::socket:
        return c.package;
      default:
        return -1;
    }
  };
  std::set<int> levels;
  for (std::size_t i : mine) levels.insert(level(t.cores[i]));
  std::set<int> cpus;
  for (std::size_t i = 0; i < t.cores.size(); ++i) {
    const bool own = std::find(mine.begin(), mine.end(), i) != mine.end();
    const int l = level(t.cores[i]);
    if (own || (bind != BindTo::core && l >= 0 && levels.count(l) > 0)) {
      cpus.insert(t.cores[i].pus.begin(), t.cores[i].pus.end());
    }
  }
  return {cpus.begin(), cpus.end()};
}

std::vector<int> numa_of(const HostTopology& t, const std::vector<int>& cpus) {
  std::set<int> out;
  for (const auto& n : t.numa_nodes) {
    for (int cpu : n.cpus) {
      if (std::binary_search(cpus.begin(), cpus.end(), cpu)) out.insert(n.os_index);
    }
  }
  return {out.begin(), out.end()};
}

// The NICs a rank may be given: those that are up with an address, where the host's
// interfaces are known (an XML or synthetic topology lists none: all of its NICs).
std::vector<Nic> usable_nics(const HostTopology& t) {
  if (t.interfaces.empty()) return t.nics;
  std::vector<Nic> out;
  for (const auto& nic : t.nics) {
    if (std::find(t.addressed.begin(), t.addressed.end(), nic.name) != t.addressed.end())
      out.push_back(nic);
  }
  return out;
}

// The NIC nearest a rank: on its GPU's NUMA node, else on its own NUMA node, else in the
// same package, else any; among equally near ones, the local rank picks round-robin. Only
// NICs with an address count; none when no NIC has one.
std::string nearest_nic(const HostTopology& t, const RankPlacement& r) {
  const std::vector<Nic> nics = usable_nics(t);
  if (nics.empty()) return {};
  int numa = r.numa.empty() ? -1 : r.numa.front();
  if (!r.gpus.empty() && t.gpus[static_cast<std::size_t>(r.gpus.front())].numa >= 0) {
    numa = t.gpus[static_cast<std::size_t>(r.gpus.front())].numa;
  }
  auto package = [&t](int node) {
    const NumaNode* n = t.numa(node);
    return n == nullptr ? -1 : n->package;
  };
  std::vector<const Nic*> near;
  for (const auto& nic : nics) {
    if (numa >= 0 && nic.numa == numa) near.push_back(&nic);
  }
  if (near.empty() && package(numa) >= 0) {
    for (const auto& nic : nics) {
      if (package(nic.numa) == package(numa)) near.push_back(&nic);
    }
  }
  if (near.empty()) {
    for (const auto& nic : nics) near.push_back(&nic);
  }
  return near[static_cast<std::size_t>(r.local_rank) % near.size()]->name;
}

void check_policy(const HostTopology& t, const std::string& host, std::size_t n,
                  const PlacementPolicy& p) {
  if (p.cpus_per_rank < 1) {
    throw UsageError("--cpus-per-rank must be 1 or more; got " + std::to_string(p.cpus_per_rank));
  }
  if (p.gpus_per_rank < 0) {
    throw UsageError("GPUs per rank must be 0 or more; got " + std::to_string(p.gpus_per_rank));
  }
  const auto g = static_cast<std::size_t>(p.gpus_per_rank);
  if (n * g > t.gpus.size()) {
    refuse(host, numbers(n, "rank", "ranks") + " x " + numbers(g, "GPU", "GPUs") +
                     " per rank need " + std::to_string(n * g) + " GPUs, and the host has " +
                     std::to_string(t.gpus.size()) + "; lower -np or --gpus-per-rank");
  }
}

// Binding to numa needs memory on the node, and a GPU's node with cores to map near it.
void check_numa_binding(const HostTopology& t, const std::string& host, const RankPlacement& r) {
  for (int node : r.numa) {
    const NumaNode* n = t.numa(node);
    if (n != nullptr && n->memory_bytes == 0) {
      refuse(host, "local rank " + std::to_string(r.local_rank) + " would be bound to NUMA node " +
                       std::to_string(node) +
                       ", which has no memory; use --bind-to core or socket");
    }
  }
}

void check_gpu_node_has_cores(const HostTopology& t, const std::string& host,
                              const PlacementPolicy& p, const std::vector<int>& gpus, int local) {
  if (p.bind_to != BindTo::numa || p.map_by != MapBy::numa || gpus.empty()) return;
  const int node = t.gpus[static_cast<std::size_t>(gpus.front())].numa;
  const NumaNode* n = t.numa(node);
  if (n != nullptr && n->cpus.empty()) {
    refuse(host, "local rank " + std::to_string(local) + "'s GPU " + std::to_string(gpus.front()) +
                     " is attached to NUMA node " + std::to_string(node) +
                     ", which has no cores to bind to; use --map-by slot or --bind-to socket");
  }
}

}  // namespace

std::vector<RankPlacement> plan_placement(const HostTopology& topology, const std::string& host,
                                          const std::vector<int>& ranks,
                                          const PlacementPolicy& asked) {
  const std::size_t n = ranks.size();
  PlacementPolicy policy = asked;
  if (policy.cpus_per_rank == kEqualShare) {
    // A default, never a refusal: a node with fewer allowed cores than ranks (hardware
    // threads counted as Slurm's CPUs) runs its ranks unbound.
    const std::size_t cores = topology.cores.size();
    policy.cpus_per_rank = static_cast<int>(n > 0 && cores >= n ? cores / n : 1);
    if (cores < n) policy.bind_to = BindTo::none;
  }
  check_policy(topology, host, n, policy);
  std::vector<std::vector<int>> gpus(n);
  for (std::size_t r = 0; r < n; ++r) {
    for (int k = 0; k < policy.gpus_per_rank; ++k) {
      gpus[r].push_back(static_cast<int>(r) * policy.gpus_per_rank + k);
    }
    check_gpu_node_has_cores(topology, host, policy, gpus[r], static_cast<int>(r));
  }
  std::vector<std::vector<std::size_t>> cores(n);
  if (policy.bind_to != BindTo::none && n > 0) cores = map_cores(topology, host, policy, gpus);
  std::vector<RankPlacement> out(n);
  for (std::size_t r = 0; r < n; ++r) {
    RankPlacement& p = out[r];
    p.rank = ranks[r];
    p.local_rank = static_cast<int>(r);
    p.gpus = gpus[r];
    if (policy.bind_to != BindTo::none) {
      for (std::size_t i : cores[r]) p.cores.push_back(topology.cores[i].index);
      p.cpus = bound_cpus(topology, policy.bind_to, cores[r]);
      p.numa = numa_of(topology, p.cpus);
      if (policy.bind_to == BindTo::numa) check_numa_binding(topology, host, p);
    }
    p.nic = nearest_nic(topology, p);
  }
  return out;
}

std::string_view to_string(BindTo b) {
  switch (b) {
    case BindTo::none:
      return "none";
    case BindTo::core:
      return "core";
    case BindTo::l3:
      return "l3";
    case BindTo::numa:
      return "numa";
    case BindTo::socket:
      return "socket";
  }
  return "none";
}

std::string_view to_string(MapBy m) {
  switch (m) {
    case MapBy::slot:
      return "slot";
    case MapBy::numa:
      return "numa";
    case MapBy::socket:
      return "socket";
  }
  return "slot";
}

std::optional<BindTo> parse_bind_to(std::string_view word) {
  for (BindTo b : {BindTo::none, BindTo::core, BindTo::l3, BindTo::numa, BindTo::socket}) {
    if (word == to_string(b)) return b;
  }
  return std::nullopt;
}

std::optional<MapBy> parse_map_by(std::string_view word) {
  for (MapBy m : {MapBy::slot, MapBy::numa, MapBy::socket}) {
    if (word == to_string(m)) return m;
  }
  return std::nullopt;
}

}  // namespace hvdrun::launcher
