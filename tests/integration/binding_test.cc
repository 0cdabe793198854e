// --bind-to on this machine end to end: every rank's Cpus_allowed_list is the CPU list of
// the plan that --report-bindings prints, and --bind-to none leaves every CPU allowed; with
// --gpus-per-rank and a fake GPU list, each rank's own CUDA_VISIBLE_DEVICES, its
// OMP_NUM_THREADS and the NIC of --network-interfaces; the default binding next to each
// rank's GPU and the NIC nearest it, on this machine's two CPUs seen through an hwloc XML
// (HWLOC_XMLFILE) as two NUMA nodes with a GPU and a NIC each.
#include <net/if.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"
#include "tests/skip.h"
#include "tests/support/processes.h"

using hvdrun::launcher::BindTo;
using hvdrun::launcher::cpu_list_text;
using hvdrun::launcher::HostTopology;
using hvdrun::launcher::load_host_topology;
using hvdrun::launcher::MapBy;
using hvdrun::launcher::plan_placement;
using namespace hvdrun::testing;

namespace {

constexpr const char* kShowCpus = "grep Cpus_allowed_list /proc/self/status";

// "[r]<stdout>:Cpus_allowed_list:\tLIST" for every rank r, sorted by rank.
std::vector<std::string> allowed_lists(const std::string& out, int np) {
  std::vector<std::string> got(static_cast<std::size_t>(np));
  for (const auto& line : lines(out)) {
    const auto tag = line.find("]<stdout>:Cpus_allowed_list:");
    REQUIRE(tag != std::string::npos);
    const int rank = std::stoi(line.substr(1, tag - 1));
    REQUIRE(rank < np);
    std::string list = line.substr(line.find(':', tag + 10) + 1);
    list.erase(0, list.find_first_not_of(" \t"));
    got[static_cast<std::size_t>(rank)] = list;
  }
  return got;
}

// This machine's CPUs 0 and 1 as two packages of one NUMA node each, GPU cuda0 and NIC lo on
// node 0, cuda1 and eth0 on node 1: what hwloc reads with HWLOC_XMLFILE set.
constexpr const char* kTwoNodesXml = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0x3" complete_cpuset="0x3" allowed_cpuset="0x3"
   nodeset="0x3" complete_nodeset="0x3" allowed_nodeset="0x3">
  <object type="Package" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1" complete_nodeset="0x1">
   <object type="NUMANode" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1" complete_nodeset="0x1" local_memory="1073741824"/>
   <object type="Core" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1" complete_nodeset="0x1">
    <object type="PU" os_index="0" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1" complete_nodeset="0x1"/>
   </object>
   <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[17-18]">
    <object type="PCIDev" pci_busid="0000:17:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1">
     <object type="OSDev" name="cuda0" osdev_type="5"/>
    </object>
    <object type="PCIDev" pci_busid="0000:18:00.0" pci_type="0200 [15b3:1021] [15b3:0041] 00">
     <object type="OSDev" name="lo" osdev_type="2"/>
    </object>
   </object>
  </object>
  <object type="Package" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x2" complete_nodeset="0x2">
   <object type="NUMANode" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x2" complete_nodeset="0x2" local_memory="1073741824"/>
   <object type="Core" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x2" complete_nodeset="0x2">
    <object type="PU" os_index="1" cpuset="0x2" complete_cpuset="0x2" nodeset="0x2" complete_nodeset="0x2"/>
   </object>
   <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[b1-b2]">
    <object type="PCIDev" pci_busid="0000:b1:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1">
     <object type="OSDev" name="cuda1" osdev_type="5"/>
    </object>
    <object type="PCIDev" pci_busid="0000:b2:00.0" pci_type="0200 [15b3:1021] [15b3:0041] 00">
     <object type="OSDev" name="eth0" osdev_type="2"/>
    </object>
   </object>
  </object>
 </object>
</topology>
)";

}  // namespace

TEST_CASE("bind-to core gives each rank the CPUs of its plan") {
  const HostTopology here = load_host_topology();
  const int np = static_cast<int>(std::min<std::size_t>(2, here.cores.size()));
  const auto plan =
      plan_placement(here, "localhost", np == 1 ? std::vector<int>{0} : std::vector<int>{0, 1},
                     {BindTo::core, MapBy::slot, 1, 0});
  Hvdrun h(
      {"-np", std::to_string(np), "--bind-to", "core", "--report-bindings", "sh", "-c", kShowCpus});
  REQUIRE(h.wait() == 0);
  const auto got = allowed_lists(h.out, np);
  for (int r = 0; r < np; ++r) {
    const std::string want = cpu_list_text(plan[static_cast<std::size_t>(r)].cpus);
    CHECK(got[static_cast<std::size_t>(r)] == want);
    CHECK(count(h.err, std::to_string(r) + "     localhost  " + std::to_string(r)) == 1);
  }
  CHECK(count(h.err, "RANK  HOST       LOCAL  CORES  CPUS") == 1);
}

TEST_CASE("bind-to none leaves every allowed CPU to every rank") {
  const HostTopology here = load_host_topology();
  Hvdrun h({"-np", "2", "sh", "-c", kShowCpus});
  REQUIRE(h.wait() == 0);
  for (const auto& list : allowed_lists(h.out, 2)) {
    CHECK(list == cpu_list_text(here.allowed_cpus));
  }
}

TEST_CASE("more ranks than cores is refused before anything starts when binding") {
  const HostTopology here = load_host_topology();
  const std::string np = std::to_string(here.cores.size() + 1);
  Hvdrun h({"-np", np, "--bind-to", "core", "sh", "-c", "echo started"});
  CHECK(h.wait() == 2);
  CHECK(h.out.empty());
  CHECK(count(h.err, "host localhost: " + np + " ranks x 1 core per rank need " + np + " cores") ==
        1);
}

TEST_CASE("each rank sees its own GPU and OMP_NUM_THREADS of its cores and the listed NIC") {
  const HostTopology here = load_host_topology();
  const int np = static_cast<int>(std::min<std::size_t>(2, here.cores.size()));
  // Three fake GPUs for two ranks, unless this machine has a list of its own (inherited
  // CUDA_VISIBLE_DEVICES, or GPUs hwloc finds), which comes first.
  Hvdrun h({"-np", std::to_string(np), "--gpus-per-rank", "1", "--bind-to", "core",
            "--network-interfaces", "hvdrun-none0,lo", "--report-bindings", "sh", "-c",
            "echo CVD=$CUDA_VISIBLE_DEVICES OMP=$OMP_NUM_THREADS IF=$NCCL_SOCKET_IFNAME"},
           {"HVDRUN_FAKE_GPUS=GPU-a,GPU-b,GPU-c"});
  REQUIRE(h.wait() == 0);
  const char* inherited = std::getenv("CUDA_VISIBLE_DEVICES");
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const bool fake = inherited == nullptr && here.gpus.empty();
  for (int r = 0; r < np; ++r) {
    const std::string id = r == 0 ? "GPU-a" : "GPU-b";
    CHECK(count(h.out, "[" + std::to_string(r) + "]<stdout>:CVD=" + (fake ? id : "")) == 1);
    CHECK(count(h.out, " OMP=" + std::string(omp == nullptr ? "1" : omp) + " IF=lo") == np);
  }
  CHECK(count(h.err, "hvdrun: OMP_NUM_THREADS is set in each rank") == (omp == nullptr ? 1 : 0));
  if (!fake) return;
  // More GPUs than the host has: refused with the numbers before anything starts.
  Hvdrun refused({"-np", "2", "--gpus-per-rank", "2", "sh", "-c", "echo started"},
                 {"HVDRUN_FAKE_GPUS=0,1,2"});
  CHECK(refused.wait() == 2);
  CHECK(refused.out.empty());
  CHECK(count(refused.err,
              "host localhost: 2 ranks x 2 GPUs per rank need 4 GPUs, and the host has 3") == 1);
}

TEST_CASE("a hostfile's gpus= list is sliced per rank and include picks from it") {
  TempDir d("gpus");
  const std::string hosts = d.path() + "/hosts";
  write_text(hosts, "localhost slots=2 gpus=5,7\n");
  const std::string show = "echo CVD=$CUDA_VISIBLE_DEVICES";
  Hvdrun h({"--hostfile", hosts, "--gpus-per-rank", "1", "sh", "-c", show});
  REQUIRE(h.wait() == 0);
  CHECK(count(h.out, "[0]<stdout>:CVD=5") == 1);
  CHECK(count(h.out, "[1]<stdout>:CVD=7") == 1);
  // DeepSpeed's form: GPU 7 of localhost only, so one rank.
  Hvdrun one({"--hostfile", hosts, "--include", "localhost:7", "sh", "-c", show});
  REQUIRE(one.wait() == 0);
  CHECK(one.out == "[0]<stdout>:CVD=7\n");
}

TEST_CASE("GPUs are bound next to by default and each rank's NIC is the one nearest its GPU") {
  const HostTopology here = load_host_topology();
  const auto& cpus = here.allowed_cpus;
  if (cpus.size() < 2 || cpus[0] != 0 || cpus[1] != 1 || ::if_nametoindex("eth0") == 0) {
    HVDRUN_SKIP("needs CPUs 0 and 1 and an interface eth0");
  }
  TempDir d("xml");
  write_text(d.path() + "/two.xml", kTwoNodesXml);
  const std::vector<std::string> env = {"HWLOC_XMLFILE=" + d.path() + "/two.xml"};
  const std::string show =
      "echo \"IF=$NCCL_SOCKET_IFNAME,$GLOO_SOCKET_IFNAME,$HOROVOD_GLOO_IFACE "
      "CVD=$CUDA_VISIBLE_DEVICES "
      "CPUS=$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status) OMP=$OMP_NUM_THREADS\"";
  Hvdrun h({"-np", "2", "--gpus-per-rank", "1", "--report-bindings", "sh", "-c", show}, env);
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  CHECK(count(h.out, "[0]<stdout>:IF=lo,lo,lo CVD=0 CPUS=0 OMP=1\n") == 1);
  CHECK(count(h.out, "[1]<stdout>:IF=eth0,eth0,eth0 CVD=1 CPUS=1 OMP=1\n") == 1);
  CHECK(count(h.err, "1     localhost  1      1      1     1     1    eth0\n") == 1);
  CHECK(count(h.err, "OMP_NUM_THREADS is set") == 0);  // the default binding leaves it
  // --bind-to none: unbound, the NIC still the nearest its GPU; the user's NIC left alone.
  Hvdrun off({"-np", "2", "--gpus-per-rank", "1", "--bind-to", "none", "-x",
              "GLOO_SOCKET_IFNAME=eth0", "sh", "-c", show},
             env);
  REQUIRE(off.wait() == 0);
  CHECK(count(off.out, " CPUS=" + cpu_list_text(cpus) + " ") == 2);
  CHECK(count(off.out, "[0]<stdout>:IF=lo,lo,lo") == 0);
  CHECK(count(off.out, ",eth0,") == 2);
}
