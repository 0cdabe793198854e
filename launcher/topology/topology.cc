// Reading a topology with hwloc and turning it into HostTopology's plain data.
#include "launcher/topology/topology.h"

#include <hwloc.h>
#include <net/if.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "common/interfaces.h"

namespace hvdrun::launcher {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;
struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using BitmapPtr = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

[[noreturn]] void refused(const std::string& what) {
  throw std::runtime_error("hwloc: " + what + " failed; the host's topology cannot be read");
}

// The set bits of `set` in ascending order; an infinite set (hwloc's "everything") is cut at
// the last bit it names explicitly.
std::vector<int> bits(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i != -1; i = hwloc_bitmap_next(set, i)) {
    out.push_back(i);
  }
  return out;
}

// The CPUs of `set` this process may use.
std::vector<int> allowed_bits(hwloc_const_bitmap_t allowed, hwloc_const_bitmap_t set) {
  std::vector<int> out;
  for (int cpu : bits(set)) {
    if (hwloc_bitmap_isset(allowed, static_cast<unsigned>(cpu))) out.push_back(cpu);
  }
  return out;
}

int logical_ancestor(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_obj_type_t type) {
  hwloc_obj_t a = hwloc_get_ancestor_obj_by_type(topo, type, obj);
  return a == nullptr ? -1 : static_cast<int>(a->logical_index);
}

// The NUMA node (kernel number) nearest `cpuset`: of those whose locality includes all of it,
// the one with the fewest CPUs. A memory-only node (HBM, CXL) is local to the CPUs of its
// parent in hwloc, as wide as a node with cores or wider, and is nobody's nearest unless it
// is the only node there; -1 when no node covers the set.
int numa_of_cpus(hwloc_topology_t topo, hwloc_const_cpuset_t cpuset) {
  int best = -1;
  int best_weight = 0;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    if (hwloc_bitmap_iszero(n->cpuset) || !hwloc_bitmap_isincluded(cpuset, n->cpuset)) continue;
    const int weight = hwloc_bitmap_weight(n->cpuset);
    if (best == -1 || (weight >= 0 && weight < best_weight)) {
      best = static_cast<int>(n->os_index);
      best_weight = weight;
    }
  }
  return best;
}

// The NUMA node an I/O object is attached to: the first node of its nearest non-I/O
// ancestor (that ancestor is the NUMA node's parent or below on machines that say where
// their PCI buses are; the Machine on those that do not: then -1, unless it has one node).
int numa_of_io(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (a == nullptr || a->nodeset == nullptr) return -1;
  if (a->type == HWLOC_OBJ_MACHINE && hwloc_bitmap_weight(a->nodeset) != 1) return -1;
  return hwloc_bitmap_first(a->nodeset);
}

std::string bus_id(hwloc_obj_t pci) {
  if (pci == nullptr || pci->type != HWLOC_OBJ_PCI_DEVICE) return {};
  const auto& p = pci->attr->pcidev;
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%04x:%02x:%02x.%x", p.domain, p.bus, p.dev, p.func);
  return text.data();
}

// The nodes, their CPUs left empty: describe_cores gives each node the cores nearest it.
void describe_numa(hwloc_topology_t topo, HostTopology& out) {
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
       n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) {
    NumaNode node;
    node.os_index = static_cast<int>(n->os_index);
    node.package = logical_ancestor(topo, n, HWLOC_OBJ_PACKAGE);
    node.memory_bytes = n->attr->numanode.local_memory;
    out.numa_nodes.push_back(std::move(node));
  }
}

// Cores, or every PU as a core of its own where hwloc knows no cores.
void describe_cores(hwloc_topology_t topo, hwloc_const_bitmap_t allowed, HostTopology& out) {
  const hwloc_obj_type_t type =
      hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  for (hwloc_obj_t c = hwloc_get_next_obj_by_type(topo, type, nullptr); c != nullptr;
       c = hwloc_get_next_obj_by_type(topo, type, c)) {
    Core core;
    core.index = static_cast<int>(c->logical_index);
    core.pus = allowed_bits(allowed, c->cpuset);
    if (core.pus.empty()) continue;
    core.package = logical_ancestor(topo, c, HWLOC_OBJ_PACKAGE);
    core.l3 = logical_ancestor(topo, c, HWLOC_OBJ_L3CACHE);
    core.numa = numa_of_cpus(topo, c->cpuset);
    for (auto& n : out.numa_nodes) {
      if (n.os_index == core.numa) n.cpus.insert(n.cpus.end(), core.pus.begin(), core.pus.end());
    }
    out.cores.push_back(std::move(core));
  }
  for (auto& n : out.numa_nodes) std::sort(n.cpus.begin(), n.cpus.end());
}

// The name of a GPU's OS device: CUDA's before NVML's before any other; "pci" when none.
std::string gpu_name(hwloc_obj_t pci) {
  std::string best;
  for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling) {
    if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == nullptr) continue;
    std::string name = c->name;
    if (name.starts_with("cuda")) return name;
    if (best.empty() || name.starts_with("nvml")) best = name;
  }
  return best.empty() ? "pci" : best;
}

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kDisplayClass = 0x03;  // PCI base class 03: VGA and 3D controllers

void describe_io(hwloc_topology_t topo, HostTopology& out) {
  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo, nullptr); p != nullptr;
       p = hwloc_get_next_pcidev(topo, p)) {
    const auto& a = p->attr->pcidev;
    if (a.vendor_id != kNvidiaVendor || (a.class_id >> 8U) != kDisplayClass) continue;
    Gpu gpu;
    gpu.index = static_cast<int>(out.gpus.size());
    gpu.name = gpu_name(p);
    gpu.pci_bus_id = bus_id(p);
    gpu.numa = numa_of_io(topo, p);
    out.gpus.push_back(std::move(gpu));
  }
  for (hwloc_obj_t d = hwloc_get_next_osdev(topo, nullptr); d != nullptr;
       d = hwloc_get_next_osdev(topo, d)) {
    if (d->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK || d->name == nullptr) continue;
    Nic nic;
    nic.name = d->name;
    nic.pci_bus_id = bus_id(d->parent);
    nic.numa = numa_of_io(topo, d);
    out.nics.push_back(std::move(nic));
  }
}

HostTopology describe(hwloc_topology_t topo, hwloc_const_bitmap_t allowed) {
  HostTopology out;
  const char* host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "HostName");
  if (host != nullptr) out.hostname = host;
  for (hwloc_obj_t p = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, nullptr); p != nullptr;
       p = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, p)) {
    out.packages.push_back(Package{static_cast<int>(p->logical_index)});
  }
  describe_numa(topo, out);
  describe_cores(topo, allowed, out);
  describe_io(topo, out);
  out.allowed_cpus = bits(allowed);
  return out;
}

// The CPUs this process may use: hwloc's allowed set (the cgroup cpuset) and, for this
// machine, the process's affinity too (a scheduler that binds with sched_setaffinity, as
// Slurm's task/affinity and taskset do, leaves the cpuset whole).
BitmapPtr usable_cpus(hwloc_topology_t topo, bool this_process) {
  BitmapPtr set(hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo)));
  if (!set) refused("hwloc_bitmap_dup");
  if (!this_process) return set;
  const BitmapPtr bound(hwloc_bitmap_alloc());
  if (!bound) refused("hwloc_bitmap_alloc");
  if (hwloc_get_cpubind(topo, bound.get(), HWLOC_CPUBIND_PROCESS) == 0 &&
      hwloc_bitmap_intersects(set.get(), bound.get())) {
    hwloc_bitmap_and(set.get(), set.get(), bound.get());
  }
  return set;
}

// Initialises a topology, lets `source` say where it comes from, keeps the I/O devices
// that matter (GPUs, NICs), loads it and describes it.
template <class Source>
HostTopology load(Source source, bool this_process = false) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) refused("hwloc_topology_init");
  const TopologyPtr topo(raw);
  source(topo.get());
  if (hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
    refused("hwloc_topology_set_io_types_filter");
  }
  if (hwloc_topology_load(topo.get()) != 0) refused("hwloc_topology_load");
  return describe(topo.get(), usable_cpus(topo.get(), this_process).get());
}

}  // namespace

const NumaNode* HostTopology::numa(int os_index) const {
  for (const auto& n : numa_nodes) {
    if (n.os_index == os_index) return &n;
  }
  return nullptr;
}

// The interfaces that are up with an address a socket can use (usable_address), sorted.
std::vector<std::string> addressed_interfaces() {
  const InterfaceList list = list_interfaces();
  std::vector<std::string> out;
  for (const ifaddrs* a = list.get(); a != nullptr; a = a->ifa_next) {
    if (usable_address(*a)) out.emplace_back(a->ifa_name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

HostTopology load_host_topology() {
  HostTopology t = load([](hwloc_topology_t) {}, true);
  if (auto* names = ::if_nameindex(); names != nullptr) {
    for (auto* n = names; n->if_index != 0 && n->if_name != nullptr; ++n) {
      t.interfaces.emplace_back(n->if_name);
    }
    ::if_freenameindex(names);
  }
  if (!t.interfaces.empty()) t.addressed = addressed_interfaces();
  return t;
}

HostTopology load_topology_xml(const std::string& xml) {
  return load([&](hwloc_topology_t t) {
    // The size hwloc wants counts the terminating NUL.
    if (hwloc_topology_set_xmlbuffer(t, xml.c_str(), static_cast<int>(xml.size() + 1)) != 0) {
      refused("hwloc_topology_set_xmlbuffer");
    }
  });
}

HostTopology load_topology_synthetic(const std::string& description) {
  return load([&](hwloc_topology_t t) {
    if (hwloc_topology_set_synthetic(t, description.c_str()) != 0) {
      refused("hwloc_topology_set_synthetic (\"" + description + "\")");
    }
  });
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += '-' + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace hvdrun::launcher
