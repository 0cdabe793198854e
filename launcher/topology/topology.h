// A host's hardware as plain data: packages, NUMA nodes, cores and their PUs, GPUs and NICs
// with the NUMA node each is attached to, and the CPUs this process may use. Read with hwloc
// (this machine, an hwloc XML or a synthetic description), so that the placement planner
// (placement.h), `hvdrun check --topology` and the agent work on values that tests can write
// by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvdrun::launcher {

/// One package (socket).
struct Package {
  /// hwloc's logical index: 0, 1, ... in the machine's order.
  int index = 0;
};

/// One NUMA node. A node may have memory and no cores (HBM, CXL) or, rarely, the reverse.
struct NumaNode {
  /// The kernel's node number (what numactl and /sys/devices/system/node call it).
  int os_index = 0;
  /// The package it belongs to; -1 when it spans none (a memory-only node outside any).
  int package = -1;
  /// Local memory in bytes; 0 when none or unknown.
  std::uint64_t memory_bytes = 0;
  /// The allowed PUs (kernel CPU numbers) of the cores whose nearest node it is, ascending;
  /// empty for a node without cores (hwloc gives a memory-only node the locality of the
  /// CPUs it is near; those CPUs belong to their own node here).
  std::vector<int> cpus;
};

/// One core with at least one allowed PU.
struct Core {
  /// hwloc's logical index among the cores of the topology.
  int index = 0;
  /// The package and NUMA node (kernel node number) it sits in; -1 when unknown.
  int package = -1;
  int numa = -1;
  /// The L3 cache it shares (hwloc's logical index of the L3); -1 when there is none.
  int l3 = -1;
  /// Its allowed PUs (kernel CPU numbers: hardware threads), ascending.
  std::vector<int> pus;
};

/// One GPU: hwloc's CUDA or NVML device, or a PCI device of NVIDIA's vendor id when no
/// driver plugin named it.
struct Gpu {
  /// The order among this host's GPUs (the PCI order, which CUDA_DEVICE_ORDER=PCI_BUS_ID
  /// gives too).
  int index = 0;
  /// The OS device's name ("cuda0", "nvml0"), or "pci" when only the PCI device is known.
  std::string name;
  /// The PCI bus id, "0000:17:00.0"; empty when unknown.
  std::string pci_bus_id;
  /// The NUMA node (kernel number) it is attached to; -1 when unknown.
  int numa = -1;
};

/// One network interface backed by a device (hwloc's network OS devices: "eth0", "ib0").
struct Nic {
  /// The interface name.
  std::string name;
  /// The PCI bus id; empty when unknown.
  std::string pci_bus_id;
  /// The NUMA node (kernel number) it is attached to; -1 when unknown.
  int numa = -1;
};

/// A host's topology.
struct HostTopology {
  /// The host's name as hwloc read it (empty for a synthetic one).
  std::string hostname;
  std::vector<Package> packages;
  /// Every NUMA node whose memory or CPUs this process may use, by kernel number.
  std::vector<NumaNode> numa_nodes;
  /// The cores with at least one allowed PU, in hwloc's logical order.
  std::vector<Core> cores;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  /// The PUs (kernel CPU numbers) this process may use: its cgroup cpuset, a scheduler's
  /// allocation, its affinity mask as hwloc reads them. Ascending.
  std::vector<int> allowed_cpus;
  /// Every network interface name of the host, virtual ones too (`lo`, bridges): what
  /// --network-interfaces may name there. Read from this machine, not from hwloc: empty for
  /// an XML or synthetic topology.
  std::vector<std::string> interfaces;
  /// Of those, the ones that are up and carry an IPv4 or IPv6 address (not only a link-local
  /// one): where NCCL's and Gloo's sockets can listen. A NIC without one (an InfiniBand port
  /// without IPoIB, a cable unplugged) is never given to a rank. Empty with `interfaces`.
  std::vector<std::string> addressed;

  /// The NUMA node with kernel number `os_index`, or nullptr.
  const NumaNode* numa(int os_index) const;
};

/// This machine, restricted to what this process may use (hwloc's default). Throws
/// std::runtime_error naming the hwloc call that failed.
HostTopology load_host_topology();

/// A topology from an hwloc XML document (lstopo --of xml). Throws std::runtime_error
/// when hwloc refuses it.
HostTopology load_topology_xml(const std::string& xml);

/// A topology from hwloc's synthetic description, as in "pack:2 numa:2 core:16 pu:2".
/// Throws std::runtime_error when hwloc refuses it.
HostTopology load_topology_synthetic(const std::string& description);

/// "0-3,8,10-11": kernel CPU numbers as a list, the form of Cpus_allowed_list.
std::string cpu_list_text(const std::vector<int>& cpus);

}  // namespace hvdrun::launcher
