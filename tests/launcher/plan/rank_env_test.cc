// Rank environments: the contract's names, -x handling, the forwarded set for remote
// hosts, per-rank values that always beat stale ones from the launching shell, and what a
// login's or a container's own variables give (the agent's merge).
#include <catch2/catch.hpp>

#include <map>

#include "launcher/plan/rank_env.h"

using namespace hvdrun::launcher;

namespace {

std::map<std::string, std::string> as_map(const EnvList& env) {
  std::map<std::string, std::string> m;
  for (const auto& e : env.entries()) {
    auto eq = e.find('=');
    REQUIRE(eq != std::string::npos);
    REQUIRE(m.count(e.substr(0, eq)) == 0);  // names are unique
    m[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return m;
}

// What a rank of a local host gets (its agent adds none of its own variables).
EnvList merged(const RankEnv& r) {
  return merge_rank_env(nullptr, {}, r.set.entries(), r.defaults.entries());
}

JobEnv job() {
  JobEnv j;
  j.size = 8;
  j.rendezvous_addr = "10.0.0.1";
  j.rendezvous_port = 4242;
  j.secret = "s3cret";
  j.master_addr = "10.0.0.2";
  j.master_port = 29500;
  j.start_timeout_s = 45;
  j.horovod_port = 4343;
  j.num_hosts = 2;
  return j;
}

}  // namespace

TEST_CASE("every rank gets the native and Horovod and torch names and stale values lose") {
  char* launcher_env[] = {const_cast<char*>("HVDRUN_RANK=99"), const_cast<char*>("RANK=77"),
                          const_cast<char*>("HOROVOD_SIZE=1"), const_cast<char*>("MASTER_PORT=1"),
                          const_cast<char*>("HOME=/root"),     nullptr};
  EnvList base = host_base_env(launcher_env, EnvSource::launcher, {});
  hvdrun::hostfile::RankSlot slot{5, 1, 1, 4, 1, 2};
  auto env = as_map(merged(rank_env(base, slot, "node2", job())));
  std::map<std::string, std::string> want = {{"HVDRUN_RANK", "5"},
                                             {"HVDRUN_SIZE", "8"},
                                             {"HVDRUN_LOCAL_RANK", "1"},
                                             {"HVDRUN_LOCAL_SIZE", "4"},
                                             {"HVDRUN_CROSS_RANK", "1"},
                                             {"HVDRUN_CROSS_SIZE", "2"},
                                             {"HVDRUN_HOSTNAME", "node2"},
                                             {"HVDRUN_RENDEZVOUS_ADDR", "10.0.0.1"},
                                             {"HVDRUN_RENDEZVOUS_PORT", "4242"},
                                             {"HVDRUN_SECRET", "s3cret"},
                                             {"HVDRUN_START_TIMEOUT", "45"},
                                             {"HOROVOD_HOSTNAME", "node2"},
                                             {"HOROVOD_RANK", "5"},
                                             {"HOROVOD_SIZE", "8"},
                                             {"HOROVOD_LOCAL_RANK", "1"},
                                             {"HOROVOD_LOCAL_SIZE", "4"},
                                             {"HOROVOD_CROSS_RANK", "1"},
                                             {"HOROVOD_CROSS_SIZE", "2"},
                                             {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.1"},
                                             {"HOROVOD_GLOO_RENDEZVOUS_PORT", "4343"},
                                             {"HOROVOD_CONTROLLER", "gloo"},
                                             {"HOROVOD_CPU_OPERATIONS", "gloo"},
                                             {"RANK", "5"},
                                             {"WORLD_SIZE", "8"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "4"},
                                             {"GROUP_RANK", "1"},
                                             {"GROUP_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "10.0.0.2"},
                                             {"MASTER_PORT", "29500"},
                                             {"HOME", "/root"}};
  for (const auto& [k, v] : want) {
    INFO(k);
    CHECK(env[k] == v);
  }
  CHECK(env.count("HOROVOD_GLOO_IFACE") == 0);
  CHECK(env.count("NCCL_SOCKET_IFNAME") == 0);
}

TEST_CASE("a rank started into a running elastic job is told so, the others are not") {
  char* launcher_env[] = {const_cast<char*>("HVDRUN_JOINING=1"), nullptr};
  EnvList base = host_base_env(launcher_env, EnvSource::launcher, {});
  JobEnv j = job();
  j.generation = 2;
  auto first = as_map(merged(rank_env(base, hvdrun::hostfile::RankSlot{}, "h", j)));
  CHECK(first["HVDRUN_GENERATION"] == "2");
  CHECK(first.count("HVDRUN_JOINING") == 0);  // the launcher's own value is stale
  j.joining = true;
  auto joining = as_map(merged(rank_env(base, hvdrun::hostfile::RankSlot{}, "h", j)));
  CHECK(joining["HVDRUN_JOINING"] == "1");
}

TEST_CASE("tuning defaults never override the user's values") {
  EnvList base;
  base.set("OMP_NUM_THREADS", "8");
  auto env =
      as_map(merged(rank_env(base, hvdrun::hostfile::RankSlot{0, 0, 0, 4, 0, 1}, "h", job())));
  CHECK(env["OMP_NUM_THREADS"] == "8");
  CHECK(env["PYTHONUNBUFFERED"] == "1");
}

TEST_CASE("network interface option names the interface for Gloo and NCCL") {
  JobEnv j = job();
  j.network_interface = "eth1";
  EnvList base;
  base.set("NCCL_SOCKET_IFNAME", "stale0");
  auto env = as_map(merged(rank_env(base, hvdrun::hostfile::RankSlot{}, "h", j)));
  CHECK(env["HOROVOD_GLOO_IFACE"] == "eth1");
  CHECK(env["NCCL_SOCKET_IFNAME"] == "eth1");
  CHECK(env["HVDRUN_NETWORK_INTERFACE"] == "eth1");
}

TEST_CASE("each host's own interface names Gloo's and NCCL's unless the user named them") {
  JobEnv j = job();
  j.host_interface = "ens5";
  auto plain = as_map(merged(rank_env(EnvList{}, hvdrun::hostfile::RankSlot{}, "h", j)));
  CHECK(plain["HOROVOD_GLOO_IFACE"] == "ens5");
  CHECK(plain["NCCL_SOCKET_IFNAME"] == "ens5");
  CHECK(plain.count("HVDRUN_NETWORK_INTERFACE") == 0);

  EnvList base;  // from the launching shell or -x: the user's choice wins, name by name
  base.set("NCCL_SOCKET_IFNAME", "=ib0");
  auto user = as_map(merged(rank_env(base, hvdrun::hostfile::RankSlot{}, "h", j)));
  CHECK(user["NCCL_SOCKET_IFNAME"] == "=ib0");
  CHECK(user["HOROVOD_GLOO_IFACE"] == "ens5");

  j.network_interface = "eth1";  // --network-interface beats the agent's finding
  auto forced = as_map(merged(rank_env(EnvList{}, hvdrun::hostfile::RankSlot{}, "h", j)));
  CHECK(forced["HOROVOD_GLOO_IFACE"] == "eth1");
  CHECK(forced["NCCL_SOCKET_IFNAME"] == "eth1");
}

TEST_CASE("a local host inherits everything and a remote one the documented set plus -x") {
  char* launcher_env[] = {const_cast<char*>("PATH=/usr/bin"),
                          const_cast<char*>("HOME=/root"),
                          const_cast<char*>("LD_LIBRARY_PATH=/opt/lib"),
                          const_cast<char*>("PYTHONPATH=/src"),
                          const_cast<char*>("VIRTUAL_ENV=/venv"),
                          const_cast<char*>("CONDA_PREFIX=/conda"),
                          const_cast<char*>("CUDA_VISIBLE_DEVICES=0,1"),
                          const_cast<char*>("NCCL_DEBUG=INFO"),
                          const_cast<char*>("HOROVOD_FUSION_THRESHOLD=1"),
                          const_cast<char*>("OMP_NUM_THREADS=4"),
                          const_cast<char*>("HVDRUN_X=1"),
                          const_cast<char*>("SECRET_TOKEN=no"),
                          const_cast<char*>("WANTED=yes"),
                          const_cast<char*>("PATHOLOGICAL=no"),
                          nullptr};
  std::vector<std::string> x = {"WANTED", "NEW=a value with spaces, 'quotes' and \"more\"",
                                "UNSET_IN_LAUNCHER", "HOME=/override"};
  // -x NAME of a variable unset here forwards nothing: named once, for the warning.
  CHECK(unset_env_names(launcher_env, x) == std::vector<std::string>{"UNSET_IN_LAUNCHER"});
  CHECK(unset_env_names(launcher_env, {"A", "A", "WANTED", "A=1"}) ==
        std::vector<std::string>{"A"});
  auto local = as_map(host_base_env(launcher_env, EnvSource::launcher, x));
  CHECK(local.size() == 15);
  CHECK(local["SECRET_TOKEN"] == "no");
  CHECK(local["HOME"] == "/override");
  CHECK(local.count("UNSET_IN_LAUNCHER") == 0);

  auto remote = as_map(host_base_env(launcher_env, EnvSource::login, x));
  std::map<std::string, std::string> want = {
      {"PATH", "/usr/bin"},       {"LD_LIBRARY_PATH", "/opt/lib"},
      {"PYTHONPATH", "/src"},     {"VIRTUAL_ENV", "/venv"},
      {"CONDA_PREFIX", "/conda"}, {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"NCCL_DEBUG", "INFO"},     {"HOROVOD_FUSION_THRESHOLD", "1"},
      {"OMP_NUM_THREADS", "4"},   {"HVDRUN_X", "1"},
      {"WANTED", "yes"},          {"NEW", "a value with spaces, 'quotes' and \"more\""},
      {"HOME", "/override"}};
  CHECK(remote == want);
}

TEST_CASE("values keep newlines and '=' intact") {
  EnvList env;
  env.set_entry("A=x=y\nz");
  env.set("A", "again=1");
  REQUIRE(env.entries().size() == 1);
  CHECK(env.entries()[0] == "A=again=1");
  CHECK_FALSE(env.set_entry("=nameless"));
  CHECK_FALSE(env.set_entry("NOEQUALS"));
}

TEST_CASE("a container keeps its paths, the rest of the forwarded set and -x go on top") {
  char* launcher_env[] = {
      const_cast<char*>("PATH=/venv/bin:/usr/bin"), const_cast<char*>("LD_LIBRARY_PATH=/opt/lib"),
      const_cast<char*>("PYTHONPATH=/src"),         const_cast<char*>("NCCL_DEBUG=INFO"),
      const_cast<char*>("LANG=de_DE.UTF-8"),        nullptr};
  auto base = as_map(host_base_env(launcher_env, EnvSource::container, {"LD_LIBRARY_PATH=/x"}));
  CHECK(base ==
        std::map<std::string, std::string>{{"NCCL_DEBUG", "INFO"}, {"LD_LIBRARY_PATH", "/x"}});
  CHECK(host_variables(EnvSource::container) == std::vector<std::string>{"*"});
  CHECK(host_defaults(launcher_env, EnvSource::container).entries().empty());
  CHECK(host_variables(EnvSource::launcher).empty());
  CHECK(env_source("exec") == EnvSource::container);
  CHECK(env_source("ssh") == EnvSource::login);
  CHECK(env_source("slurm") == EnvSource::login);
  CHECK(env_source("local") == EnvSource::launcher);

  // The agent in the container: its own PATH, LD_LIBRARY_PATH and variables, the -x value
  // and the forwarded NCCL_DEBUG over them, its own OMP_NUM_THREADS over hvdrun's default.
  char* container[] = {
      const_cast<char*>("PATH=/ctr/bin:/bin"), const_cast<char*>("LD_LIBRARY_PATH=/ctr/lib"),
      const_cast<char*>("CTR_ONLY=1"),         const_cast<char*>("OMP_NUM_THREADS=6"),
      const_cast<char*>("NCCL_DEBUG=WARN"),    nullptr};
  EnvList b = host_base_env(launcher_env, EnvSource::container, {"CTR_ONLY=2"});
  RankEnv r = rank_env(b, hvdrun::hostfile::RankSlot{1, 1, 1, 2, 0, 1}, "ctr1", job(),
                       host_defaults(launcher_env, EnvSource::container));
  auto env = as_map(merge_rank_env(container, host_variables(EnvSource::container), r.set.entries(),
                                   r.defaults.entries()));
  CHECK(env["PATH"] == "/ctr/bin:/bin");
  CHECK(env["LD_LIBRARY_PATH"] == "/ctr/lib");
  CHECK(env["CTR_ONLY"] == "2");
  CHECK(env["NCCL_DEBUG"] == "INFO");
  CHECK(env["OMP_NUM_THREADS"] == "6");
  CHECK(env["PYTHONUNBUFFERED"] == "1");
  CHECK(env["HVDRUN_RANK"] == "1");
  CHECK(env.count("LANG") == 0);
}

TEST_CASE("a login host's ranks get its HOME, USER, LOGNAME, SHELL, LANG and LC_*") {
  char* launcher_env[] = {const_cast<char*>("PATH=/venv/bin:/usr/bin"),
                          const_cast<char*>("HOME=/home/launcher"),
                          const_cast<char*>("USER=me"),
                          const_cast<char*>("LANG=de_DE.UTF-8"),
                          const_cast<char*>("LC_TIME=C"),
                          const_cast<char*>("LC_PAPER=en_GB.UTF-8"),
                          nullptr};
  CHECK(host_variables(EnvSource::login) ==
        std::vector<std::string>{"HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_*"});
  EnvList defaults = host_defaults(launcher_env, EnvSource::login);
  CHECK(as_map(defaults) == std::map<std::string, std::string>{{"LANG", "de_DE.UTF-8"},
                                                               {"LC_TIME", "C"},
                                                               {"LC_PAPER", "en_GB.UTF-8"}});
  char* login[] = {const_cast<char*>("HOME=/home/me"),
                   const_cast<char*>("USER=me"),
                   const_cast<char*>("LOGNAME=me"),
                   const_cast<char*>("SHELL=/bin/zsh"),
                   const_cast<char*>("LC_TIME=fr_FR"),
                   const_cast<char*>("PATH=/usr/bin:/bin"),
                   const_cast<char*>("SSH_CONNECTION=x"),
                   const_cast<char*>("MAIL=/var/mail/me"),
                   nullptr};
  EnvList b = host_base_env(launcher_env, EnvSource::login, {"LC_PAPER=C"});
  RankEnv r = rank_env(b, hvdrun::hostfile::RankSlot{}, "node1", job(), defaults);
  auto env = as_map(merge_rank_env(login, host_variables(EnvSource::login), r.set.entries(),
                                   r.defaults.entries()));
  CHECK(env["HOME"] == "/home/me");  // the host's, not the launcher's
  CHECK(env["LOGNAME"] == "me");
  CHECK(env["SHELL"] == "/bin/zsh");
  CHECK(env["LC_TIME"] == "fr_FR");            // the host's own
  CHECK(env["LANG"] == "de_DE.UTF-8");         // the host has none: the launcher's
  CHECK(env["LC_PAPER"] == "C");               // -x beats both
  CHECK(env["PATH"] == "/venv/bin:/usr/bin");  // forwarded: the venv's python resolves
  CHECK(env.count("SSH_CONNECTION") == 0);     // not one of the login variables
  CHECK(env.count("MAIL") == 0);
}

TEST_CASE("a -x pattern forwards every launcher variable whose name starts with its prefix") {
  char* launcher_env[] = {const_cast<char*>("TORCH_SHOW_CPP_STACKTRACES=1"),
                          const_cast<char*>("TORCH_NCCL_ASYNC_ERROR_HANDLING=3"),
                          const_cast<char*>("MYAPP_MODE=fast"),
                          const_cast<char*>("MYAPP_SEED=7"),
                          const_cast<char*>("MYAPPLE=no"),
                          const_cast<char*>("OTHER=no"),
                          const_cast<char*>("HVDRUN_JOINING=1"),
                          nullptr};
  const std::vector<std::string> x = {"MYAPP_*", "MYAPP_SEED=8", "HVDRUN_*", "NOPE_*"};
  auto remote = as_map(host_base_env(launcher_env, EnvSource::login, x));
  CHECK(remote["MYAPP_MODE"] == "fast");
  CHECK(remote["MYAPP_SEED"] == "8");  // a later -x NAME=VALUE wins over the pattern
  CHECK(remote.count("MYAPPLE") == 0);
  CHECK(remote.count("OTHER") == 0);
  // A pattern never carries what only some ranks get from the launcher.
  CHECK(remote.count("HVDRUN_JOINING") == 0);
  auto container = as_map(host_base_env(launcher_env, EnvSource::container, {"MYAPP_*"}));
  CHECK(container["MYAPP_MODE"] == "fast");
  CHECK(container["MYAPP_SEED"] == "7");
  // A pattern that forwards nothing here is named for the warning (HVDRUN_* matches only
  // what it never carries); one that forwards something is not.
  CHECK(unset_env_names(launcher_env, x) == std::vector<std::string>{"HVDRUN_*", "NOPE_*"});
  CHECK(unset_env_names(launcher_env, {"MYAPP_*", "TORCH_*"}).empty());
}

TEST_CASE("TORCH_ UCX_ and FI_ variables are forwarded to remote hosts by default") {
  for (const char* name : {"TORCH_DISTRIBUTED_DEBUG", "UCX_TLS", "FI_PROVIDER", "NCCL_DEBUG"}) {
    CHECK(forwarded_by_default(name));
  }
  for (const char* name : {"TORCH", "UCX", "FI", "FIX_ME", "MY_TORCH_X", "TORCHVISION_X"}) {
    CHECK_FALSE(forwarded_by_default(name));
  }
  char* launcher_env[] = {const_cast<char*>("TORCH_DISTRIBUTED_DEBUG=DETAIL"),
                          const_cast<char*>("UCX_TLS=rc,sm"), const_cast<char*>("FI_PROVIDER=efa"),
                          const_cast<char*>("FIRST=no"), nullptr};
  const std::map<std::string, std::string> want = {
      {"TORCH_DISTRIBUTED_DEBUG", "DETAIL"}, {"UCX_TLS", "rc,sm"}, {"FI_PROVIDER", "efa"}};
  CHECK(as_map(host_base_env(launcher_env, EnvSource::login, {})) == want);
  CHECK(as_map(host_base_env(launcher_env, EnvSource::container, {})) == want);
}
