// The binding policy in the ranks' environment, each rank's placement read back from it, and
// the launcher's check and report of this machine's ranks, on the two-socket host.
#include "launcher/plan/placement_env.h"

#include <catch2/catch.hpp>

#include "common/error.h"
#include "launcher/plan/rank_devices.h"
#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("the policy travels in the environment and comes back", "[placement]") {
  CHECK(placement_env({}).empty());
  const auto env = placement_env({BindTo::numa, MapBy::socket, 4, 0});
  CHECK(env == std::vector<std::string>{"HVDRUN_BIND_TO=numa", "HVDRUN_MAP_BY=socket",
                                        "HVDRUN_CPUS_PER_RANK=4"});
  const auto back = policy_from_env(env);
  REQUIRE(back);
  CHECK(back->bind_to == BindTo::numa);
  CHECK(back->map_by == MapBy::socket);
  CHECK(back->cpus_per_rank == 4);
  CHECK_FALSE(policy_from_env({"HVDRUN_BIND_TO=none"}));
  CHECK_FALSE(policy_from_env({"PATH=/bin"}));
  CHECK_THROWS_AS(policy_from_env({"HVDRUN_BIND_TO=board"}), UsageError);
  CHECK_THROWS_AS(policy_from_env({"HVDRUN_BIND_TO=core", "HVDRUN_CPUS_PER_RANK=x"}), UsageError);
}

TEST_CASE("an agent places a rank from its local rank and local size", "[placement]") {
  std::vector<std::string> env = placement_env({BindTo::core, MapBy::slot, 8, 0});
  env.emplace_back("HVDRUN_LOCAL_RANK=3");
  env.emplace_back("HVDRUN_LOCAL_SIZE=8");
  const auto p = rank_setup(testing::two_socket_eight_gpu(), "node1", env, false);
  REQUIRE(p);
  CHECK(cpu_list_text(p->placed.cpus) == "24-31,88-95");
  CHECK(p->placed.numa == std::vector<int>{1});
  // OMP_NUM_THREADS is its cores, not their hardware threads; left alone when the user set it.
  CHECK(p->env == std::vector<std::string>{"OMP_NUM_THREADS=8"});
  CHECK(rank_setup(testing::two_socket_eight_gpu(), "node1", env, true)->env.empty());
  env.back() = "HVDRUN_LOCAL_SIZE=9";
  CHECK_THROWS_WITH(rank_setup(testing::two_socket_eight_gpu(), "node1", env, false),
                    Contains("host node1: 9 ranks x 8 cores per rank need 72 cores"));
  CHECK_FALSE(rank_setup(testing::two_socket_eight_gpu(), "node1", {"HVDRUN_LOCAL_RANK=0"}, false));
}

LaunchPlan two_host_plan() {
  LaunchPlan plan;
  plan.hosts = {PlannedHost{"localhost", 2, true, LaunchMethod::local, {0, 1}},
                PlannedHost{"node2", 2, false, LaunchMethod::ssh, {2, 3}}};
  return plan;
}

TEST_CASE("inside Slurm with --cpus-per-task, ranks get an equal share of their node's cores",
          "[placement]") {
  LaunchPlan plan;
  plan.hosts = {PlannedHost{"n1", 3, false, LaunchMethod::slurm, {0, 1, 2}}};
  const std::vector<std::string> slurm_env = {"SLURM_CPUS_PER_TASK=4"};
  std::string report;
  const LaunchOptions placed =
      with_placement(plan, LaunchOptions{}, report, testing::two_socket_eight_gpu, slurm_env);
  CHECK(placed.placement.bind_to == BindTo::core);
  CHECK(placed.placement.cpus_per_rank == kEqualShare);
  CHECK(placed.env == std::vector<std::string>{"HVDRUN_BIND_TO=core", "HVDRUN_MAP_BY=slot",
                                               "HVDRUN_CPUS_PER_RANK=share"});
  CHECK_THAT(omp_note(placed, slurm_env), Contains("each rank is bound to an equal share"));
  // Each agent then splits its node's allowed cores: 64 among 3 ranks, 21 each.
  std::vector<std::string> env = placed.env;
  env.insert(env.end(), {"HVDRUN_LOCAL_RANK=2", "HVDRUN_LOCAL_SIZE=3"});
  const auto p = rank_setup(testing::two_socket_eight_gpu(), "n1", env, false);
  REQUIRE(p);
  CHECK(p->placed.cores.size() == 21);
  CHECK(p->placed.cores.front() == 42);
  // More ranks than cores (hardware threads counted as CPUs): unbound, never refused.
  const auto many = plan_placement(testing::two_socket_eight_gpu(), "n1", std::vector<int>(65, 0),
                                   placed.placement);
  CHECK(many.size() == 65);
  CHECK(many.back().cpus.empty());
  // Not without --cpus-per-task, not with a --bind-to or GPUs of the user's, not over SSH.
  CHECK_FALSE(slurm_equal_share(plan, LaunchOptions{}, {"PATH=/bin"}));
  LaunchOptions given;
  given.bind_to_given = true;
  CHECK_FALSE(slurm_equal_share(plan, given, slurm_env));
  LaunchOptions gpus;
  gpus.placement.gpus_per_rank = 1;
  CHECK_FALSE(slurm_equal_share(plan, gpus, slurm_env));
  plan.hosts.front().method = LaunchMethod::ssh;
  CHECK_FALSE(slurm_equal_share(plan, LaunchOptions{}, slurm_env));
}

TEST_CASE("the launcher checks and reports this machine's ranks", "[placement]") {
  LaunchOptions o;
  o.placement = {BindTo::core, MapBy::slot, 2, 0};
  o.report_bindings = true;
  std::string report;
  const LaunchOptions bound =
      with_placement(two_host_plan(), o, report, [] { return testing::two_socket_eight_gpu(); });
  CHECK(bound.env == placement_env(o.placement));
  CHECK(report ==
        "RANK  HOST       LOCAL  CORES  CPUS       NUMA  GPU  NIC\n"
        "0     localhost  0      0-1    0-1,64-65  0     -    ib0\n"
        "1     localhost  1      2-3    2-3,66-67  0     -    ib0\n");
  o.placement.cpus_per_rank = 40;
  CHECK_THROWS_WITH(
      with_placement(two_host_plan(), o, report, [] { return testing::two_socket_eight_gpu(); }),
      Contains("host localhost: 2 ranks x 40 cores per rank need 80 cores"));
}

TEST_CASE("without binding the launch is left as it was", "[placement]") {
  LaunchOptions o;
  o.env = {"A=1"};
  std::string report;
  bool read = false;
  const LaunchOptions same = with_placement(two_host_plan(), o, report, [&] {
    read = true;
    return testing::two_socket_eight_gpu();
  });
  CHECK(same.env == o.env);
  CHECK(report.empty());
  CHECK_FALSE(read);
}

TEST_CASE("GPUs are bound next to by default, and --bind-to none says no", "[placement]") {
  LaunchOptions o;
  o.placement.gpus_per_rank = 1;
  o.report_bindings = true;
  const auto topology = [] { return testing::two_socket_eight_gpu(); };
  std::string report;
  CHECK(with_placement(two_host_plan(), o, report, topology, {}).env ==
        std::vector<std::string>{"HVDRUN_GPUS_PER_RANK=1"});
  CHECK_THAT(report, Contains("0     localhost  0      0      0-15,64-79  0     0    ib0\n"));
  o.bind_to_given = true;  // --bind-to none
  report.clear();
  CHECK(with_placement(two_host_plan(), o, report, topology, {}).env ==
        std::vector<std::string>{"HVDRUN_GPUS_PER_RANK=1", "HVDRUN_BIND_TO=none"});
  CHECK_THAT(report, Contains("0     localhost  0      unbound  -     -     0    ib0\n"));
}

}  // namespace
}  // namespace hvdrun::launcher
