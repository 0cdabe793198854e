// The launch plan: host source and its default, placement, and the launch method of each
// host, decided once.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>

#include "common/error.h"
#include "launcher/launch_method.h"
#include "launcher/launch_plan.h"

using namespace hvdrun::launcher;

namespace {

LaunchOptions with_hosts(std::vector<hvdrun::hostfile::HostSlots> hosts, std::optional<int> np) {
  LaunchOptions o;
  o.hosts = std::move(hosts);
  o.np = np;
  o.command = {"true"};
  return o;
}

}  // namespace

TEST_CASE("no hosts: localhost with -np slots") {
  LaunchOptions o;
  o.np = 3;
  auto plan = make_plan(o);
  CHECK(plan.source == HostSource::localhost);
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].name == "localhost");
  CHECK(plan.hosts[0].local);
  CHECK(plan.hosts[0].method == LaunchMethod::local);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1, 2});
  CHECK(plan.size() == 3);
  CHECK(plan.all_local());
}

TEST_CASE("no hosts and no -np is bad usage") {
  CHECK_THROWS_AS(make_plan(LaunchOptions{}), hvdrun::UsageError);
}

TEST_CASE("ranks fill hosts in order, hosts without a rank take no part") {
  auto plan = make_plan(with_hosts({{"localhost", 2}, {"node1", 2}, {"node2", 2}}, 3));
  CHECK(plan.source == HostSource::command_line);
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1});
  CHECK(plan.hosts[1].name == "node1");
  CHECK(plan.hosts[1].slots == 1);
  CHECK(plan.hosts[1].ranks == std::vector<int>{2});
  CHECK(plan.hosts[1].method == LaunchMethod::ssh);
  CHECK_FALSE(plan.hosts[1].local);
  CHECK_FALSE(plan.all_local());
  REQUIRE(plan.placement.hosts.size() == plan.hosts.size());
  for (std::size_t i = 0; i < plan.hosts.size(); ++i)
    CHECK(plan.placement.hosts[i].name == plan.hosts[i].name);
  CHECK(plan.placement.ranks[2].host_index == 1);
}

TEST_CASE("more ranks than slots is bad usage") {
  CHECK_THROWS_AS(make_plan(with_hosts({{"localhost", 1}}, 2)), hvdrun::UsageError);
}

TEST_CASE("the check plan keeps every host and places no rank") {
  auto plan = make_check_plan(with_hosts({{"localhost", 2}, {"127.0.0.2", 2}, {"node2", 1}}, 1));
  REQUIRE(plan.hosts.size() == 3);
  CHECK(plan.size() == 0);
  CHECK(plan.hosts[0].method == LaunchMethod::local);
  CHECK(plan.hosts[1].method == LaunchMethod::ssh);  // loopback, but not this machine's name
  CHECK(plan.hosts[2].slots == 1);
  CHECK(plan.hosts[2].ranks.empty());
  CHECK(to_string(LaunchMethod::ssh) == "ssh");
}

namespace {

// A plan environment from a table of variables, with or without srun on PATH.
PlanEnvironment fake_env(std::map<std::string, std::string> vars, bool srun) {
  auto table = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  PlanEnvironment env;
  env.getenv = [table](const char* name) -> const char* {
    auto it = table->find(name);
    return it == table->end() ? nullptr : it->second.c_str();
  };
  env.on_path = [srun](const std::string& program) { return srun && program == "srun"; };
  return env;
}

const std::map<std::string, std::string> kSlurm = {
    {"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "node[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}};

}  // namespace

TEST_CASE("host sources in priority order: -H, then the allocation, then localhost") {
  LaunchOptions o;
  o.command = {"true"};
  auto alloc = make_plan(o, fake_env(kSlurm, true));
  CHECK(alloc.source == HostSource::scheduler);
  CHECK(alloc.allocation.scheduler == "slurm");
  CHECK(alloc.size() == 6);
  CHECK(alloc.hosts[2].name == "node3");
  CHECK(alloc.hosts[2].ranks == std::vector<int>{4, 5});

  auto given = make_plan(with_hosts({{"nodeX", 2}}, std::nullopt), fake_env(kSlurm, true));
  CHECK(given.source == HostSource::command_line);
  CHECK(given.size() == 2);
  CHECK(given.launcher.kind == LauncherChoice::ssh);

  o.np = 2;
  auto none = make_plan(o, fake_env({}, true));
  CHECK(none.source == HostSource::localhost);
  CHECK(none.launcher.kind == LauncherChoice::ssh);
}

TEST_CASE("launcher auto is slurm only for a Slurm allocation with srun on PATH") {
  LaunchOptions o;
  o.command = {"true"};
  CHECK(make_plan(o, fake_env(kSlurm, true)).launcher.kind == LauncherChoice::slurm);
  CHECK(make_plan(o, fake_env(kSlurm, true)).hosts[0].method == LaunchMethod::slurm);
  CHECK(make_plan(o, fake_env(kSlurm, false)).launcher.kind == LauncherChoice::ssh);
  CHECK(make_plan(o, fake_env({{"LSB_MCPU_HOSTS", "a 1"}}, true)).launcher.kind ==
        LauncherChoice::ssh);
}

TEST_CASE("launcher slurm outside a Slurm allocation is bad usage") {
  LaunchOptions o = with_hosts({{"node1", 1}}, std::nullopt);
  o.launcher.kind = LauncherChoice::slurm;
  CHECK_THROWS_WITH(make_plan(o, fake_env({}, true)),
                    "--launcher slurm needs a Slurm allocation (SLURM_JOB_ID is not set); run "
                    "hvdrun inside salloc or sbatch, or choose --launcher ssh");
}

TEST_CASE("launcher exec: reaches every host through the command, this machine included") {
  LaunchOptions o = with_hosts({{"localhost", 1}, {"c1", 1}}, std::nullopt);
  o.launcher.kind = LauncherChoice::exec;
  o.launcher.exec_argv = {"docker", "exec", "-i", "{host}"};
  auto plan = make_plan(o, fake_env({}, false));
  for (const auto& h : plan.hosts) {
    CHECK(h.method == LaunchMethod::exec);
    CHECK_FALSE(h.local);
  }
}

TEST_CASE("no -np without any host source names every source in its message") {
  LaunchOptions o;
  o.command = {"python", "train.py"};
  CHECK_THROWS_WITH(make_plan(o, fake_env({}, true)),
                    "-np is required without -H, --hostfile or a scheduler allocation; expected "
                    "e.g. hvdrun -np 4 python");
}

TEST_CASE("exec: commands split as a shell would and get {host} and the agent command") {
  using hvdrun::launcher::exec_command_for;
  using hvdrun::launcher::parse_launcher;
  using hvdrun::launcher::split_command_words;
  using Words = std::vector<std::string>;
  CHECK(split_command_words("docker exec -i {host}") == Words{"docker", "exec", "-i", "{host}"});
  CHECK(split_command_words("  kubectl  exec -i {host} -- ") ==
        Words{"kubectl", "exec", "-i", "{host}", "--"});
  CHECK(split_command_words("sh -c 'exec \"$@\"' {host}") ==
        Words{"sh", "-c", "exec \"$@\"", "{host}"});
  CHECK(split_command_words(R"(a "b \"c\" d" e\ f '')") == Words{"a", "b \"c\" d", "e f", ""});
  CHECK_THROWS_WITH(split_command_words("a \"b"),
                    "--launcher: unclosed \" in 'a \"b'; close the quote");

  CHECK(exec_command_for({"ssh", "{host}.cluster", "--name={host}"}, "n1", {"hvdrun", "agent"}) ==
        Words{"ssh", "n1.cluster", "--name=n1", "hvdrun", "agent"});
  CHECK(to_string(parse_launcher("exec:sh -c 'x y' {host}")) == "exec:sh -c 'x y' {host}");
  CHECK(to_string(parse_launcher("ssh")) == "ssh");
  CHECK(parse_launcher("auto").kind == LauncherChoice::automatic);
}
