// Each rank's GPUs, OMP_NUM_THREADS and NIC on the two-socket, eight-GPU host and on a host
// without GPUs (a fake list): the slices, where the list comes from, the refusals, and the
// launcher's check and report of them.
#include "launcher/plan/rank_devices.h"

#include <catch2/catch.hpp>

#include "common/error.h"
#include "launcher/plan/dry_run.h"
#include "launcher/plan/placement_env.h"
#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher {
namespace {

using Catch::Matchers::Contains;

// The environment of local rank `local` of `size` with these extra variables.
std::vector<std::string> rank_env_of(int local, int size, std::vector<std::string> extra) {
  extra.push_back("HVDRUN_LOCAL_RANK=" + std::to_string(local));
  extra.push_back("HVDRUN_LOCAL_SIZE=" + std::to_string(size));
  return extra;
}

std::string value(const RankSetup& s, const std::string& name) {
  return env_value(s.env, name).value_or("<unset>");
}

HostTopology no_gpus() {
  HostTopology t = testing::two_socket_eight_gpu();
  t.gpus.clear();
  t.nics.clear();
  return t;
}

TEST_CASE("each rank gets its own slice of the host's GPUs", "[devices]") {
  const HostTopology t = testing::two_socket_eight_gpu();
  // hwloc's eight GPUs, two per rank; under --map-by numa each rank lands next to them.
  for (int r = 0; r < 4; ++r) {
    const auto s = rank_setup(t, "node1", rank_env_of(r, 4, {"HVDRUN_GPUS_PER_RANK=2"}), false);
    REQUIRE(s);
    CHECK(value(*s, "CUDA_VISIBLE_DEVICES") ==
          std::to_string(2 * r) + "," + std::to_string(2 * r + 1));
    // GPUs without --bind-to: the default binding, to its GPUs' NUMA node (OMP left alone).
    CHECK(s->placed.numa == std::vector<int>{r});
    CHECK(s->placed.cpus == t.numa(r)->cpus);
    CHECK(value(*s, "OMP_NUM_THREADS") == "<unset>");
  }
  const auto near = rank_setup(
      t, "node1",
      rank_env_of(5, 8, {"HVDRUN_GPUS_PER_RANK=1", "HVDRUN_BIND_TO=core", "HVDRUN_MAP_BY=numa"}),
      false);
  CHECK(value(*near, "CUDA_VISIBLE_DEVICES") == "5");
  CHECK(near->placed.numa == std::vector<int>{2});  // GPU 5 is on NUMA node 2
  CHECK(near->placed.nic == "ib1");
  CHECK(value(*near, "OMP_NUM_THREADS") == "1");
  // The hostfile's list, then CUDA_VISIBLE_DEVICES, win over hwloc's; ids may be UUIDs.
  const auto listed = rank_setup(
      t, "node1",
      rank_env_of(1, 2,
                  {"HVDRUN_GPUS_PER_RANK=2", "HVDRUN_HOST_GPUS=0,2,4,6", "CUDA_VISIBLE_DEVICES=7"}),
      false);
  CHECK(value(*listed, "CUDA_VISIBLE_DEVICES") == "4,6");
  const auto inherited = rank_setup(
      t, "node1", rank_env_of(1, 2, {"HVDRUN_GPUS_PER_RANK=1", "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b"}),
      false);
  CHECK(value(*inherited, "CUDA_VISIBLE_DEVICES") == "GPU-b");
  // A hostfile list without --gpus-per-rank: every rank of the host sees the whole list.
  const auto whole = rank_setup(t, "node1", rank_env_of(0, 2, {"HVDRUN_HOST_GPUS=1,3"}), false);
  REQUIRE(whole);
  CHECK(value(*whole, "CUDA_VISIBLE_DEVICES") == "1,3");
}

TEST_CASE("the default binding is the NUMA node of the rank's GPU, where hwloc knows it",
          "[devices]") {
  const HostTopology t = testing::two_socket_eight_gpu();
  const auto setup = [&](const HostTopology& host, std::vector<std::string> extra) {
    extra.emplace_back("HVDRUN_GPUS_PER_RANK=1");
    return rank_setup(host, "node1", rank_env_of(5, 8, extra), false);
  };
  const auto near = setup(t, {});
  CHECK(near->placed.numa == std::vector<int>{2});  // GPU 5
  CHECK(cpu_list_text(near->placed.cpus) == "32-47,96-111");
  CHECK_FALSE(near->bind_memory);  // its CPUs only: first touch puts its memory there
  CHECK(setup(t, {"HVDRUN_BIND_TO=numa", "HVDRUN_MAP_BY=numa"})->bind_memory);
  // --bind-to none (HVDRUN_BIND_TO=none) turns it off.
  CHECK(setup(t, {"HVDRUN_BIND_TO=none"})->placed.cpus.empty());
  // A GPU whose node hwloc does not know (ids it has not seen, a fake list): unbound.
  CHECK(setup(t, {"CUDA_VISIBLE_DEVICES=GPU-a,GPU-b,GPU-c,GPU-d,GPU-e,GPU-f,GPU-g,GPU-h"})
            ->placed.cpus.empty());
  HostTopology unknown = t;
  unknown.gpus[0].numa = -1;
  CHECK(setup(unknown, {})->placed.cpus.empty());
  // A placement the planner refuses (GPU 5 on a node without cores) leaves it unbound.
  HostTopology coreless = t;
  for (auto& g : coreless.gpus) g.numa = 2;
  coreless.numa_nodes[2].cpus.clear();
  for (auto& c : coreless.cores) c.numa = c.numa == 2 ? 1 : c.numa;
  CHECK(setup(coreless, {})->placed.cpus.empty());
}

TEST_CASE("a host without GPUs takes the fake list and too few GPUs are refused", "[devices]") {
  const auto fake =
      rank_setup(no_gpus(), "node1",
                 rank_env_of(2, 3, {"HVDRUN_GPUS_PER_RANK=1", "HVDRUN_FAKE_GPUS=0,1,2"}), false);
  REQUIRE(fake);
  CHECK(value(*fake, "CUDA_VISIBLE_DEVICES") == "2");
  CHECK(fake->gpu_ids == std::vector<std::string>{"0", "1", "2"});
  CHECK_THROWS_WITH(
      rank_setup(no_gpus(), "node1", rank_env_of(0, 4, {"HVDRUN_GPUS_PER_RANK=1"}), false),
      Contains("host node1: 4 ranks x 1 GPU per rank need 4 GPUs, and the host has 0") &&
          Contains("; lower -np or --gpus-per-rank (GPUs from hwloc: none)"));
  CHECK_THROWS_WITH(
      rank_setup(testing::two_socket_eight_gpu(), "node1",
                 rank_env_of(0, 3, {"HVDRUN_GPUS_PER_RANK=2", "HVDRUN_HOST_GPUS=0,2,4,6"}), false),
      Contains("3 ranks x 2 GPUs per rank need 6 GPUs, and the host has 4") &&
          Contains("the hostfile's gpus=: 0,2,4,6"));
  // Without any of the flags nothing is set up.
  CHECK_FALSE(rank_setup(no_gpus(), "node1", rank_env_of(0, 1, {"HVDRUN_FAKE_GPUS=0"}), false));
}

TEST_CASE("without --network-interfaces a rank's NIC is the one nearest its GPU", "[devices]") {
  const HostTopology t = testing::two_socket_eight_gpu();  // ib0 on NUMA 0, ib1 on NUMA 2
  auto all = [](const std::string&) { return true; };
  const auto gpu = [&](int local, std::vector<std::string> extra) {
    extra.emplace_back("HVDRUN_GPUS_PER_RANK=1");
    return rank_setup(t, "node1", rank_env_of(local, 8, extra), false, all);
  };
  // GPUs alone, unbound: GPU 1 is on node 0 (ib0), GPU 5 on node 2 (ib1).
  for (const auto& [local, nic] : {std::pair{1, "ib0"}, std::pair{5, "ib1"}}) {
    const auto s = gpu(local, {});
    REQUIRE(s);
    CHECK(s->placed.nic == nic);
    for (const char* name : kNicVars) CHECK(value(*s, name) == nic);
  }
  // Bound without GPUs: the NIC of its bound node's package (cores 32-39 are on node 2).
  const auto bound = rank_setup(
      t, "node1", rank_env_of(4, 8, {"HVDRUN_BIND_TO=core", "HVDRUN_CPUS_PER_RANK=8"}), false, all);
  CHECK(bound->placed.numa == std::vector<int>{2});
  CHECK(value(*bound, "NCCL_SOCKET_IFNAME") == "ib1");
  // The user's own choice, a host with one NIC, or a name the host lacks: left alone.
  CHECK(rank_setup(t, "node1", rank_env_of(5, 8, {"HVDRUN_GPUS_PER_RANK=1"}), false, all, true)
            ->env ==
        std::vector<std::string>{"CUDA_VISIBLE_DEVICES=5", "CUDA_DEVICE_ORDER=PCI_BUS_ID"});
  HostTopology one = t;
  one.nics.pop_back();
  CHECK(value(*rank_setup(one, "node1", rank_env_of(5, 8, {"HVDRUN_GPUS_PER_RANK=1"}), false, all),
              "NCCL_SOCKET_IFNAME") == "<unset>");
  auto no_ib1 = [](const std::string& name) { return name != "ib1"; };
  CHECK(value(*rank_setup(t, "node1", rank_env_of(5, 8, {"HVDRUN_GPUS_PER_RANK=1"}), false, no_ib1),
              "NCCL_SOCKET_IFNAME") == "<unset>");
  // --network-interfaces wins over the nearest.
  CHECK(value(*gpu(5, {"HVDRUN_NETWORK_INTERFACES=ib0"}), "NCCL_SOCKET_IFNAME") == "ib0");
}

TEST_CASE("the first of --network-interfaces on the host is its ranks' NIC", "[devices]") {
  auto has = [](const std::string& name) { return name == "eth1" || name == "ib0"; };
  const auto s =
      rank_setup(no_gpus(), "node1", rank_env_of(0, 1, {"HVDRUN_NETWORK_INTERFACES=ib9,eth1,ib0"}),
                 false, has);
  REQUIRE(s);
  CHECK(s->placed.nic == "eth1");
  CHECK(value(*s, "NCCL_SOCKET_IFNAME") == "eth1");
  CHECK(value(*s, "GLOO_SOCKET_IFNAME") == "eth1");
  CHECK(value(*s, "HOROVOD_GLOO_IFACE") == "eth1");
  CHECK_THROWS_WITH(
      rank_setup(no_gpus(), "node2", rank_env_of(0, 1, {"HVDRUN_NETWORK_INTERFACES=ib9,eth9"}),
                 false, has),
      Contains("host node2 has none of the interfaces of --network-interfaces ib9,eth9"));
  CHECK(interface_present("lo"));
  CHECK_FALSE(interface_present("hvdrun-none0"));
}

TEST_CASE("the launcher checks GPU lists and reports GPUs and NICs before the start", "[devices]") {
  LaunchPlan plan;
  plan.hosts = {PlannedHost{"localhost", 2, true, LaunchMethod::local, {0, 1}, {}},
                PlannedHost{"node2", 2, false, LaunchMethod::ssh, {2, 3}, {"0", "2", "4", "6"}}};
  LaunchOptions o;
  o.placement.gpus_per_rank = 2;
  o.placement.bind_to = BindTo::core;
  o.network_interfaces = {"lo"};
  o.report_bindings = true;
  std::string report;
  const auto topology = [] { return testing::two_socket_eight_gpu(); };
  const LaunchOptions placed = with_placement(plan, o, report, topology, {"PATH=/bin"});
  CHECK(report ==
        "RANK  HOST       LOCAL  CORES  CPUS  NUMA  GPU  NIC\n"
        "0     localhost  0      0      0,64  0     0,1  lo\n"
        "1     localhost  1      1      1,65  0     2,3  lo\n");
  // node2 from the topology its agent sent: its gpus= list, its own interfaces.
  HostTopology node2 = testing::two_socket_eight_gpu();
  node2.interfaces = {"lo", "ib0"};
  CHECK(host_report(node2, plan.hosts[1], placed) ==
        "RANK  HOST   LOCAL  CORES  CPUS  NUMA  GPU  NIC\n"
        "2     node2  0      0      0,64  0     0,2  lo\n"
        "3     node2  1      1      1,65  0     4,6  lo\n");
  node2.interfaces = {"ib0"};
  CHECK_THROWS_WITH(host_report(node2, plan.hosts[1], placed),
                    Contains("host node2 has none of the interfaces of --network-interfaces lo"));
  CHECK(env_value(placed.env, "HVDRUN_GPUS_PER_RANK") == "2");
  CHECK(env_value(placed.env, "HVDRUN_NETWORK_INTERFACES") == "lo");
  CHECK_THAT(omp_note(o, {"PATH=/bin"}), Contains("hvdrun: OMP_NUM_THREADS is set in each rank"));
  CHECK(omp_note(o, {"OMP_NUM_THREADS=4"}).empty());
  o.placement.gpus_per_rank = 5;
  CHECK_THROWS_WITH(with_placement(plan, o, report, topology, {}),
                    Contains("host localhost: 2 ranks x 5 GPUs per rank need 10 GPUs"));
  plan.hosts.front().ranks = {0};
  CHECK_THROWS_WITH(with_placement(plan, o, report, topology, {}),
                    Contains("host node2: 2 ranks x 5 GPUs per rank need 10 GPUs, and its gpus= "
                             "lists 4 (0,2,4,6)"));
}

TEST_CASE("eight ranks with a GPU each land next to it as docs/placement.md draws them",
          "[devices]") {
  LaunchPlan plan;
  plan.hosts = {PlannedHost{"node1", 8, true, LaunchMethod::local, {0, 1, 2, 3, 4, 5, 6, 7}, {}}};
  LaunchOptions o;
  o.placement = {BindTo::core, MapBy::numa, 1, 1};
  o.report_bindings = true;
  std::string report;
  with_placement(plan, o, report, [] { return testing::two_socket_eight_gpu(); }, {});
  CHECK(report ==
        "RANK  HOST   LOCAL  CORES  CPUS    NUMA  GPU  NIC\n"
        "0     node1  0      0      0,64    0     0    ib0\n"
        "1     node1  1      1      1,65    0     1    ib0\n"
        "2     node1  2      16     16,80   1     2    ib0\n"
        "3     node1  3      17     17,81   1     3    ib0\n"
        "4     node1  4      32     32,96   2     4    ib1\n"
        "5     node1  5      33     33,97   2     5    ib1\n"
        "6     node1  6      48     48,112  3     6    ib1\n"
        "7     node1  7      49     49,113  3     7    ib1\n");
}

TEST_CASE("the dry run's JSON shows each host's GPU list and each rank's slice", "[devices]") {
  LaunchPlan plan;
  plan.launcher.kind = LauncherChoice::ssh;
  plan.placement = hostfile::place({{"node1", 2, {"2", "6"}}, {"node2", 1, {}}}, std::nullopt);
  plan.hosts = {PlannedHost{"node1", 2, false, LaunchMethod::ssh, {0, 1}, {"2", "6"}},
                PlannedHost{"node2", 1, false, LaunchMethod::ssh, {2}, {}}};
  plan.gpus_per_rank = 1;
  const std::string json = render_dry_run_json(plan);
  CHECK_THAT(json, Contains("{\"host\": \"node1\", \"slots\": 2, \"method\": \"ssh\", "
                            "\"gpus\": [\"2\", \"6\"]}"));
  CHECK_THAT(json, Contains("\"gpus\": null}]"));
  CHECK_THAT(json, Contains("{\"rank\": 1, \"host\": \"node1\", \"local_rank\": 1, \"gpus\": "
                            "[\"6\"]}, {\"rank\": 2, \"host\": \"node2\", \"local_rank\": 0, "
                            "\"gpus\": null}"));
}

}  // namespace
}  // namespace hvdrun::launcher
