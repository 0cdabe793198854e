// The placement planner on hand-written topologies: every --map-by and --bind-to on the
// two-socket, eight-GPU host of docs/placement.md, GPUs and NICs, and the refusals.
#include "launcher/topology/placement.h"

#include <catch2/catch.hpp>
#include <numeric>

#include "common/error.h"
#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher {
namespace {

using Catch::Matchers::Contains;
using testing::odd_numa;
using testing::two_socket_eight_gpu;

std::vector<int> ranks_from(int first, int count) {
  std::vector<int> out(static_cast<std::size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

std::vector<RankPlacement> plan(const HostTopology& t, int count, PlacementPolicy p) {
  return plan_placement(t, t.hostname, ranks_from(10, count), p);
}

TEST_CASE("bind-to none binds nothing and still gives GPUs and the nearest NIC", "[placement]") {
  const auto plan8 = plan(two_socket_eight_gpu(), 8, {BindTo::none, MapBy::slot, 1, 1});
  REQUIRE(plan8.size() == 8);
  const std::vector<std::string> nic = {"ib0", "ib0", "ib0", "ib0", "ib1", "ib1", "ib1", "ib1"};
  for (int r = 0; r < 8; ++r) {
    const RankPlacement& p = plan8[static_cast<std::size_t>(r)];
    CHECK(p.rank == 10 + r);
    CHECK(p.local_rank == r);
    CHECK(p.cpus.empty());
    CHECK(p.numa.empty());
    CHECK(p.gpus == std::vector<int>{r});
    // GPUs 2 and 3 sit on NUMA node 1, which has no NIC: ib0 is in the same package.
    CHECK(p.nic == nic[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("a NIC without an address is given to no rank", "[placement]") {
  HostTopology t = two_socket_eight_gpu();
  // The host's interfaces are known (read from the machine): ib0 is down or has no IPoIB
  // address, so every rank gets ib1, the NIC with one, however far from its GPU.
  t.interfaces = {"lo", "ib0", "ib1"};
  t.addressed = {"ib1", "lo"};
  for (const auto& p : plan(t, 8, {BindTo::none, MapBy::slot, 1, 1})) CHECK(p.nic == "ib1");
  // No NIC with an address: none is chosen (NCCL and Gloo then pick their own).
  t.addressed = {"lo"};
  for (const auto& p : plan(t, 2, {BindTo::core, MapBy::slot, 1, 0})) CHECK(p.nic.empty());
  // Unknown interfaces (an XML or synthetic topology): every NIC counts, as above.
  t.interfaces.clear();
  t.addressed.clear();
  CHECK(plan(t, 8, {BindTo::none, MapBy::slot, 1, 1})[0].nic == "ib0");
}

TEST_CASE("map-by slot bind-to core gives consecutive cores and their threads", "[placement]") {
  const auto plan8 = plan(two_socket_eight_gpu(), 8, {BindTo::core, MapBy::slot, 8, 0});
  for (int r = 0; r < 8; ++r) {
    const RankPlacement& p = plan8[static_cast<std::size_t>(r)];
    CHECK(p.cores == ranks_from(8 * r, 8));
    std::vector<int> cpus = ranks_from(8 * r, 8);
    for (int c : ranks_from(64 + 8 * r, 8)) cpus.push_back(c);
    CHECK(p.cpus == cpus);
    CHECK(p.numa == std::vector<int>{r / 2});
    CHECK(cpu_list_text(p.cpus) == std::to_string(8 * r) + "-" + std::to_string(8 * r + 7) + "," +
                                       std::to_string(64 + 8 * r) + "-" +
                                       std::to_string(64 + 8 * r + 7));
  }
}

TEST_CASE("map-by numa without GPUs deals ranks round-robin over NUMA nodes", "[placement]") {
  const auto p = plan(two_socket_eight_gpu(), 6, {BindTo::core, MapBy::numa, 1, 0});
  const std::vector<int> core = {0, 16, 32, 48, 1, 17};
  for (std::size_t r = 0; r < p.size(); ++r) {
    CHECK(p[r].cores == std::vector<int>{core[r]});
    CHECK(p[r].cpus == std::vector<int>{core[r], core[r] + 64});
    CHECK(p[r].numa == std::vector<int>{core[r] / 16});
  }
}

TEST_CASE("map-by numa with GPUs puts each rank on its GPU's NUMA node", "[placement]") {
  const auto p = plan(two_socket_eight_gpu(), 8, {BindTo::numa, MapBy::numa, 4, 1});
  for (int r = 0; r < 8; ++r) {
    const RankPlacement& q = p[static_cast<std::size_t>(r)];
    const int node = r / 2;
    CHECK(q.gpus == std::vector<int>{r});
    CHECK(q.numa == std::vector<int>{node});
    // The second rank of a node takes the next four cores; binding to numa gives the node.
    CHECK(q.cores == ranks_from(16 * node + 4 * (r % 2), 4));
    CHECK(cpu_list_text(q.cpus) ==
          std::to_string(16 * node) + "-" + std::to_string(16 * node + 15) + "," +
              std::to_string(64 + 16 * node) + "-" + std::to_string(64 + 16 * node + 15));
  }
}

TEST_CASE("map-by socket alternates packages and bind-to socket gives the package", "[placement]") {
  const auto p = plan(two_socket_eight_gpu(), 3, {BindTo::socket, MapBy::socket, 1, 0});
  CHECK(p[0].cores == std::vector<int>{0});
  CHECK(p[1].cores == std::vector<int>{32});
  CHECK(p[2].cores == std::vector<int>{1});
  CHECK(cpu_list_text(p[0].cpus) == "0-31,64-95");
  CHECK(cpu_list_text(p[1].cpus) == "32-63,96-127");
  CHECK(p[0].numa == std::vector<int>{0, 1});
  CHECK(p[1].numa == std::vector<int>{2, 3});
  CHECK(p[1].nic == "ib1");
}

TEST_CASE("map-by socket with GPUs puts each rank in its GPU's package", "[placement]") {
  const auto p = plan(two_socket_eight_gpu(), 8, {BindTo::socket, MapBy::socket, 1, 1});
  const std::vector<int> core = {0, 1, 2, 3, 32, 33, 34, 35};
  for (std::size_t r = 0; r < p.size(); ++r) {
    CHECK(p[r].cores == std::vector<int>{core[r]});
    CHECK(cpu_list_text(p[r].cpus) == (r < 4 ? "0-31,64-95" : "32-63,96-127"));
    CHECK(p[r].nic == (r < 4 ? "ib0" : "ib1"));
  }
}

TEST_CASE("bind-to l3 gives every core sharing the rank's L3", "[placement]") {
  const auto p = plan(two_socket_eight_gpu(), 2, {BindTo::l3, MapBy::slot, 4, 0});
  CHECK(cpu_list_text(p[0].cpus) == "0-7,64-71");
  CHECK(cpu_list_text(p[1].cpus) == "0-7,64-71");
  const auto wide = plan(two_socket_eight_gpu(), 1, {BindTo::l3, MapBy::slot, 10, 0});
  CHECK(cpu_list_text(wide[0].cpus) == "0-15,64-79");
}

TEST_CASE("more ranks x cpus-per-rank than cores is refused with the numbers", "[placement]") {
  REQUIRE_THROWS_WITH(plan(two_socket_eight_gpu(), 9, {BindTo::core, MapBy::slot, 8, 0}),
                      Contains("host node1: 9 ranks x 8 cores per rank need 72 cores") &&
                          Contains("64 cores are allowed"));
}

TEST_CASE("more ranks than cores is refused when binding and allowed unbound", "[placement]") {
  CHECK_THROWS_AS(plan(two_socket_eight_gpu(), 65, {BindTo::core, MapBy::slot, 1, 0}), UsageError);
  const auto p = plan(two_socket_eight_gpu(), 65, {BindTo::none, MapBy::slot, 1, 0});
  CHECK(p.size() == 65);
  CHECK(p.back().cpus.empty());
}

TEST_CASE("more ranks x GPUs than GPUs is refused with the numbers", "[placement]") {
  REQUIRE_THROWS_WITH(
      plan(two_socket_eight_gpu(), 5, {BindTo::none, MapBy::slot, 1, 2}),
      Contains("host node1: 5 ranks x 2 GPUs per rank need 10 GPUs") && Contains("has 8"));
  const auto p = plan(two_socket_eight_gpu(), 4, {BindTo::none, MapBy::slot, 1, 2});
  CHECK(p[3].gpus == std::vector<int>{6, 7});
}

TEST_CASE("ranks whose cores fit in no NUMA node are refused", "[placement]") {
  // 5 x 12 = 60 cores fit in 64, but after four ranks every node has 4 free cores left.
  REQUIRE_THROWS_WITH(plan(two_socket_eight_gpu(), 5, {BindTo::core, MapBy::numa, 12, 0}),
                      Contains("no NUMA node has 12 free cores left for local rank 4"));
}

TEST_CASE("a NUMA node without cores is skipped by map-by numa", "[placement]") {
  const auto p = plan(odd_numa(false), 4, {BindTo::numa, MapBy::numa, 1, 0});
  CHECK(p[0].numa == std::vector<int>{0});
  CHECK(p[1].numa == std::vector<int>{1});
  CHECK(p[2].numa == std::vector<int>{0});
  CHECK(p[3].cpus == std::vector<int>{2, 3});
}

TEST_CASE("a GPU on a NUMA node without cores refuses bind-to numa near it", "[placement]") {
  REQUIRE_THROWS_WITH(plan(odd_numa(false), 2, {BindTo::numa, MapBy::numa, 1, 1}),
                      Contains("host odd: local rank 1's GPU 1 is attached to NUMA node 2") &&
                          Contains("no cores"));
  // Bound to cores, the rank falls back to the round-robin over nodes with cores.
  const auto p = plan(odd_numa(false), 2, {BindTo::core, MapBy::numa, 1, 1});
  CHECK(p[1].cores == std::vector<int>{2});
}

TEST_CASE("binding to a NUMA node without memory is refused", "[placement]") {
  REQUIRE_THROWS_WITH(
      plan(odd_numa(true), 2, {BindTo::numa, MapBy::numa, 1, 0}),
      Contains("host odd: local rank 1 would be bound to NUMA node 1") && Contains("no memory"));
  CHECK(plan(odd_numa(true), 2, {BindTo::core, MapBy::numa, 1, 0}).size() == 2);
}

TEST_CASE("bad cpus-per-rank and GPU counts are refused", "[placement]") {
  CHECK_THROWS_AS(plan(two_socket_eight_gpu(), 1, {BindTo::core, MapBy::slot, 0, 0}), UsageError);
  CHECK_THROWS_AS(plan(two_socket_eight_gpu(), 1, {BindTo::core, MapBy::slot, 1, -1}), UsageError);
  CHECK(plan(two_socket_eight_gpu(), 0, {BindTo::core, MapBy::slot, 1, 0}).empty());
}

TEST_CASE("policy words parse and print back", "[placement]") {
  for (const char* w : {"none", "core", "l3", "numa", "socket"}) {
    REQUIRE(parse_bind_to(w));
    CHECK(to_string(*parse_bind_to(w)) == w);
  }
  for (const char* w : {"slot", "numa", "socket"}) {
    REQUIRE(parse_map_by(w));
    CHECK(to_string(*parse_map_by(w)) == w);
  }
  CHECK_FALSE(parse_bind_to("hwthread"));
  CHECK_FALSE(parse_map_by("node"));
}

TEST_CASE("the planner on a synthetic hwloc topology", "[placement]") {
  const HostTopology t = load_topology_synthetic("pack:2 numa:2 core:16 pu:2");
  const auto p = plan_placement(t, "synthetic", ranks_from(0, 4), {BindTo::numa, MapBy::numa});
  for (int r = 0; r < 4; ++r) {
    CHECK(p[static_cast<std::size_t>(r)].numa == std::vector<int>{r});
    CHECK(p[static_cast<std::size_t>(r)].cpus.size() == 32);
  }
}

}  // namespace
}  // namespace hvdrun::launcher
