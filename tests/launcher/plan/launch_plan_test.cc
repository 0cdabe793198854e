// The launch plan: host source and its default, placement, and the launch method of each
// host, decided once.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>

#include "common/error.h"
#include "launcher/plan/launch_method.h"
#include "launcher/plan/launch_plan.h"

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

TEST_CASE("an -np written after the command is said to have gone to the program") {
  for (const auto& misplaced :
       std::vector<std::vector<std::string>>{{"python", "train.py", "-np", "2"},
                                             {"python", "train.py", "-np=2"},
                                             {"python", "--num-proc", "2", "train.py"}}) {
    LaunchOptions o;
    o.command = misplaced;
    CHECK_THROWS_WITH(make_plan(o, fake_env({}, true)),
                      "-np is required without -H, --hostfile or a scheduler allocation: -np and "
                      "other options after the command go to the program; put them before "
                      "'python', as in hvdrun -np 4 python ...");
  }
  // The program's own first word is not hvdrun's option.
  LaunchOptions o;
  o.command = {"./np-tool", "-npx"};
  CHECK_THROWS_WITH(make_plan(o, fake_env({}, true)), Catch::EndsWith("hvdrun -np 4 ./np-tool"));
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

  CHECK(exec_command_for({"docker", "exec", "-i", "--name={host}"}, "n1", {"hvdrun", "agent"}) ==
        Words{"docker", "exec", "-i", "--name=n1", "hvdrun", "agent"});
  // ssh joins its arguments and the remote shell splits them again: one quoted line.
  const Words agent = {"sh", "-c", "'/opt/hv' --version && exec '/opt/hv' agent"};
  const std::string line = R"(sh -c ''\''/opt/hv'\'' --version && exec '\''/opt/hv'\'' agent')";
  CHECK(exec_command_for({"ssh", "-F", "cfg", "{host}.cluster"}, "n1", agent) ==
        Words{"ssh", "-F", "cfg", "n1.cluster", line});
  CHECK(exec_command_for({"/usr/bin/ssh", "{host}"}, "n1", agent) ==
        Words{"/usr/bin/ssh", "n1", line});
  // {command} puts that line where the command wants it, and nothing is appended.
  CHECK(exec_command_for({"gcloud", "compute", "ssh", "{host}", "--command", "{command}"}, "n1",
                         agent) == Words{"gcloud", "compute", "ssh", "n1", "--command", line});
  CHECK(exec_command_for({"wrap", "--run={command}", "{host}"}, "n1", {"a b", "c"}) ==
        Words{"wrap", "--run='a b' c", "n1"});
  CHECK(hvdrun::launcher::shell_line({"it's", "", "x"}) == R"('it'\''s' '' x)");
  CHECK(to_string(parse_launcher("exec:sh -c 'x y' {host}")) == "exec:sh -c 'x y' {host}");
  CHECK(to_string(parse_launcher("ssh")) == "ssh");
  CHECK(parse_launcher("auto").kind == LauncherChoice::automatic);
}

TEST_CASE("srun hvdrun: one of several tasks of a step is refused, in task 0's voice only") {
  using hvdrun::launcher::srun_task_refusal;
  auto getenv_of = [](const std::map<std::string, std::string>& vars) {
    return fake_env(vars, true).getenv;
  };
  auto r = srun_task_refusal(getenv_of({{"SLURM_JOB_ID", "7"},
                                        {"SLURM_STEP_ID", "0"},
                                        {"SLURM_STEP_NUM_TASKS", "6"},
                                        {"SLURM_NTASKS", "6"},
                                        {"SLURM_PROCID", "0"}}));
  REQUIRE(r);
  CHECK(r->print);
  CHECK(r->message ==
        "hvdrun was started by srun once per task (6 tasks in job step 0), and each copy would "
        "launch the whole job; run it once, in the batch script without srun (hvdrun starts its "
        "own step), or use --launcher ssh");
  auto other = srun_task_refusal(
      getenv_of({{"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"}}));
  REQUIRE(other);
  CHECK_FALSE(other->print);
  CHECK_THAT(other->message, Catch::Contains("(2 tasks in job step 3)"));

  // Where hvdrun belongs: the batch script (no step id, or the batch step's), salloc's
  // shell, a one-task step.
  CHECK_FALSE(srun_task_refusal(getenv_of({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "6"}})));
  CHECK_FALSE(srun_task_refusal(
      getenv_of({{"SLURM_STEP_ID", "4294967291"}, {"SLURM_NTASKS", "6"}, {"SLURM_PROCID", "0"}})));
  CHECK_FALSE(srun_task_refusal(
      getenv_of({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_NTASKS", "6"}})));
  CHECK_FALSE(srun_task_refusal(getenv_of({})));
}

TEST_CASE("srun -n1 hvdrun: the step's variables are said to describe the step") {
  auto vars = kSlurm;
  vars["SLURM_STEP_ID"] = "0";
  vars["SLURM_TASKS_PER_NODE"] = "1";
  LaunchOptions o;
  o.command = {"true"};
  CHECK_THROWS_WITH(make_plan(o, fake_env(vars, true)),
                    "hvdrun runs inside srun's job step 0, so the Slurm variables describe that "
                    "step (SLURM_TASKS_PER_NODE='1'), not the allocation of "
                    "SLURM_JOB_NODELIST='node[1-3]'; run hvdrun in the batch script or the salloc "
                    "shell itself, without srun (it starts its own step), or name the hosts with "
                    "-H/--hostfile");
  CHECK_THROWS_WITH(make_check_plan(o, fake_env(vars, true)),
                    Catch::StartsWith("hvdrun runs inside srun's job step 0"));
  // Hosts named on the command line need no allocation: the step does not matter.
  o.hosts = {{"localhost", 2}};
  CHECK(make_plan(o, fake_env(vars, false)).hosts.size() == 1);
}
