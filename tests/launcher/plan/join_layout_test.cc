// Join mode's layout (launcher/plan/join_layout.h): counts of ranks per node to each node's
// ranks, the plan and the rank coordinates they make, and which counts may differ.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "compat/env.h"
#include "launcher/plan/join_layout.h"
#include "launcher/plan/launch_plan.h"

using namespace hvdrun::launcher;

namespace {

// A join-mode job on node 0 as the command line makes it, with `counts` laid out.
LaunchPlan join_plan(const std::vector<int>& counts) {
  LaunchOptions o;
  o.command = {"true"};
  o.launcher.kind = LauncherChoice::join;
  o.join.nnodes = static_cast<int>(counts.size());
  return make_plan(laid_out(o, join_layout(counts)));
}

// Where the count of a word came from, as a node says it.
const std::string kGpu = "--nproc-per-node gpu: 3 from CUDA_VISIBLE_DEVICES";

}  // namespace

TEST_CASE("join layout: each node's ranks follow the previous node's") {
  CHECK(join_layout({2, 1, 3}) ==
        std::vector<JoinNode>{{"node0", 0, 2}, {"node1", 2, 1}, {"node2", 3, 3}});
  CHECK(join_layout({4, 4}) == std::vector<JoinNode>{{"node0", 0, 4}, {"node1", 4, 4}});
  CHECK(layout_text(join_layout({2, 1, 3})) == "node0: ranks 0-1, node1: rank 2, node2: ranks 3-5");

  const LaunchOptions o = laid_out(LaunchOptions{}, join_layout({2, 1, 3}));
  CHECK(o.np == 6);
  REQUIRE(o.hosts.size() == 3);
  CHECK(o.hosts[1].name == "node1");
  CHECK(o.hosts[1].slots == 1);
  CHECK(o.hosts[2].slots == 3);
}

TEST_CASE("join layout: a node without ranks or too many ranks in all is refused") {
  CHECK_THROWS_WITH(join_layout({2, 0}),
                    "node rank 1 runs 0 ranks; every node runs at least one: give "
                    "--nproc-per-node 1 or more");
  CHECK_THROWS_AS(join_layout({1 << 19, 1 << 19, 1}), hvdrun::UsageError);
  CHECK_NOTHROW(join_layout({1 << 19, 1 << 19}));
}

TEST_CASE("join layout: the plan of unequal nodes gives every rank its coordinates") {
  const LaunchPlan plan = join_plan({2, 1, 3});
  CHECK(plan.size() == 6);
  REQUIRE(plan.hosts.size() == 3);
  CHECK(plan.hosts[0].local);
  CHECK(plan.hosts[0].method == LaunchMethod::local);
  CHECK(plan.hosts[1].method == LaunchMethod::join);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1});
  CHECK(plan.hosts[1].ranks == std::vector<int>{2});
  CHECK(plan.hosts[2].ranks == std::vector<int>{3, 4, 5});
  // rank: host index, local rank, local size, cross rank, cross size (Horovod's cross
  // communicators: the ranks of one local rank across the nodes that have it).
  const std::vector<std::vector<int>> want = {{0, 0, 2, 0, 3}, {0, 1, 2, 0, 2}, {1, 0, 1, 1, 3},
                                              {2, 0, 3, 2, 3}, {2, 1, 3, 1, 2}, {2, 2, 3, 0, 1}};
  REQUIRE(plan.placement.ranks.size() == want.size());
  for (std::size_t r = 0; r < want.size(); ++r) {
    const auto& s = plan.placement.ranks[r];
    INFO("rank " << r);
    CHECK(s.rank == static_cast<int>(r));
    CHECK(std::vector<int>{s.host_index, s.local_rank, s.local_size, s.cross_rank, s.cross_size} ==
          want[r]);
  }
  // torchrun's names for rank 4: its node's size, not node 0's.
  const auto env = hvdrun::compat::compat_env(plan.placement, 4, {}).set;
  const auto value = [&](const std::string& name) {
    for (const auto& [n, v] : env)
      if (n == name) return v;
    return std::string("unset");
  };
  CHECK(value("RANK") == "4");
  CHECK(value("LOCAL_RANK") == "1");
  CHECK(value("LOCAL_WORLD_SIZE") == "3");
  CHECK(value("WORLD_SIZE") == "6");
  CHECK(value("GROUP_RANK") == "2");
  CHECK(value("GROUP_WORLD_SIZE") == "3");
  CHECK(value("ROLE_RANK") == "4");
  CHECK(value("ROLE_WORLD_SIZE") == "6");
}

TEST_CASE("join layout: counts may differ only when every node counts its own") {
  JoinOptions number;
  number.ranks_per_node = 2;
  JoinOptions word;
  word.ranks_per_node = 2;
  word.ranks_per_node_from = "--nproc-per-node gpu: 2 from hwloc";

  // Two words: any counts.
  CHECK(count_refusal(word, 3, kGpu).empty());
  CHECK(count_refusal(word, 2, kGpu).empty());
  // Two numbers: equal, or one of them is a typo.
  CHECK(count_refusal(number, 2, "").empty());
  CHECK(count_refusal(number, 3, "") ==
        "it runs 3 ranks per node, node 0 runs 2; every node runs as many: give every node the "
        "same --nproc-per-node number");
  // A number beside a word: refused, whatever the counts, either way round.
  const std::string rule =
      "; nodes may run different numbers of ranks only when every node counts its own: give "
      "every node the same --nproc-per-node (gpu, cpu or auto on every node, or the same number "
      "on every node)";
  CHECK(count_refusal(number, 3, kGpu) == "it counts its own ranks (" + kGpu +
                                              ") and node 0 was given a number "
                                              "(--nproc-per-node 2)" +
                                              rule);
  CHECK(count_refusal(number, 2, kGpu).find(rule) != std::string::npos);
  CHECK(count_refusal(word, 2, "") ==
        "it was given a number (--nproc-per-node 2) and node 0 counts its own ranks "
        "(--nproc-per-node gpu: 2 from hwloc)" +
            rule);
}
