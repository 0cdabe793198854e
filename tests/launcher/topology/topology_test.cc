// The topology loader against hwloc's synthetic descriptions and a hand-written XML (GPUs,
// a NIC, a NUMA node without cores, a restricted allowed set), and this machine's topology.
#include "launcher/topology/topology.h"

#include <sched.h>

#include <catch2/catch.hpp>
#include <stdexcept>

namespace hvdrun::launcher {
namespace {

// Two packages of one NUMA node and two cores each, a memory-only NUMA node, PU 0 not
// allowed (as a cgroup cpuset would say), a GPU with its CUDA device and a NIC on package 0,
// and a GPU without a driver (a bare NVIDIA PCI device) on package 1.
constexpr const char* kSmallXml = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0xf" complete_cpuset="0xf" allowed_cpuset="0xe"
   nodeset="0x7" complete_nodeset="0x7" allowed_nodeset="0x7">
  <info name="HostName" value="node7"/>
  <object type="Package" os_index="0" cpuset="0x3" complete_cpuset="0x3" nodeset="0x1"
    complete_nodeset="0x1">
   <object type="NUMANode" os_index="0" cpuset="0x3" complete_cpuset="0x3" nodeset="0x1"
     complete_nodeset="0x1" local_memory="1073741824"/>
   <object type="Core" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1"
     complete_nodeset="0x1">
    <object type="PU" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1"
      complete_nodeset="0x1"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x1"
     complete_nodeset="0x1">
    <object type="PU" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x1"
      complete_nodeset="0x1"/>
   </object>
   <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[17-18]">
    <object type="PCIDev" pci_busid="0000:17:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1">
     <object type="OSDev" name="cuda0" osdev_type="5"/>
    </object>
    <object type="PCIDev" pci_busid="0000:18:00.0" pci_type="0200 [15b3:1021] [15b3:0041] 00">
     <object type="OSDev" name="eth1" osdev_type="2"/>
    </object>
   </object>
  </object>
  <object type="Package" os_index="1" cpuset="0xc" complete_cpuset="0xc" nodeset="0x2"
    complete_nodeset="0x2">
   <object type="NUMANode" os_index="1" cpuset="0xc" complete_cpuset="0xc" nodeset="0x2"
     complete_nodeset="0x2" local_memory="2147483648"/>
   <object type="Core" os_index="0" cpuset="0x4" complete_cpuset="0x4" nodeset="0x2"
     complete_nodeset="0x2">
    <object type="PU" os_index="2" cpuset="0x4" complete_cpuset="0x4" nodeset="0x2"
      complete_nodeset="0x2"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x8" complete_cpuset="0x8" nodeset="0x2"
     complete_nodeset="0x2">
    <object type="PU" os_index="3" cpuset="0x8" complete_cpuset="0x8" nodeset="0x2"
      complete_nodeset="0x2"/>
   </object>
   <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[b1-b1]">
    <object type="PCIDev" pci_busid="0000:b1:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1"/>
   </object>
  </object>
  <object type="NUMANode" os_index="2" cpuset="0x0" complete_cpuset="0x0" nodeset="0x4"
    complete_nodeset="0x4" local_memory="4294967296"/>
 </object>
</topology>
)";

TEST_CASE("synthetic two-socket four-NUMA-node 64-core host", "[topology]") {
  const HostTopology t = load_topology_synthetic("pack:2 numa:2 core:16 pu:2");
  CHECK(t.packages.size() == 2);
  REQUIRE(t.numa_nodes.size() == 4);
  REQUIRE(t.cores.size() == 64);
  CHECK(t.allowed_cpus.size() == 128);
  for (const auto& n : t.numa_nodes) {
    CHECK(n.cpus.size() == 32);
    CHECK(n.package == n.os_index / 2);
  }
  // Synthetic PUs are numbered in order: core 17 holds PUs 34 and 35, in NUMA node 1.
  CHECK(t.cores[17].pus == std::vector<int>{34, 35});
  CHECK(t.cores[17].numa == 1);
  CHECK(t.cores[17].package == 0);
  CHECK(t.cores[40].package == 1);
  CHECK(t.gpus.empty());
  CHECK(t.nics.empty());
}

TEST_CASE("XML with GPUs and a NIC and a memory-only NUMA node", "[topology]") {
  const HostTopology t = load_topology_xml(kSmallXml);
  CHECK(t.hostname == "node7");
  CHECK(t.allowed_cpus == std::vector<int>{1, 2, 3});
  // PU 0 is not allowed, so its core is gone; the others keep their NUMA nodes.
  REQUIRE(t.cores.size() == 3);
  CHECK(t.cores[0].pus == std::vector<int>{1});
  CHECK(t.cores[0].numa == 0);
  CHECK(t.cores[2].numa == 1);
  REQUIRE(t.numa_nodes.size() == 3);
  const NumaNode* memory_only = t.numa(2);
  REQUIRE(memory_only != nullptr);
  CHECK(memory_only->cpus.empty());
  CHECK(memory_only->memory_bytes == 4294967296ULL);
  CHECK(t.numa(0)->cpus == std::vector<int>{1});
  CHECK(t.numa(1)->memory_bytes == 2147483648ULL);
  REQUIRE(t.gpus.size() == 2);
  CHECK(t.gpus[0].name == "cuda0");
  CHECK(t.gpus[0].pci_bus_id == "0000:17:00.0");
  CHECK(t.gpus[0].numa == 0);
  CHECK(t.gpus[1].name == "pci");
  CHECK(t.gpus[1].numa == 1);
  REQUIRE(t.nics.size() == 1);
  CHECK(t.nics[0].name == "eth1");
  CHECK(t.nics[0].pci_bus_id == "0000:18:00.0");
  CHECK(t.nics[0].numa == 0);
}

TEST_CASE("topology descriptions hwloc refuses are errors", "[topology]") {
  CHECK_THROWS_AS(load_topology_synthetic("pack:two"), std::runtime_error);
  CHECK_THROWS_AS(load_topology_xml("<topology>"), std::runtime_error);
}

TEST_CASE("this machine's topology has the CPUs this process may use", "[topology]") {
  const HostTopology t = load_host_topology();
  REQUIRE_FALSE(t.allowed_cpus.empty());
  REQUIRE_FALSE(t.cores.empty());
  std::size_t pus = 0;
  for (const auto& c : t.cores) pus += c.pus.size();
  CHECK(pus == t.allowed_cpus.size());
  // Never a CPU outside this process's affinity: binding must stay inside it.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  for (int cpu : t.allowed_cpus) CHECK(CPU_ISSET(cpu, &mine));
}

TEST_CASE("CPU lists are written as ranges", "[topology]") {
  CHECK(cpu_list_text({}).empty());
  CHECK(cpu_list_text({3}) == "3");
  CHECK(cpu_list_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_list_text({5, 4, 4, 64}) == "4-5,64");
}

}  // namespace
}  // namespace hvdrun::launcher
