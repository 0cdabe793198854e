// torchrun's flags on hvdrun's command line (cli/join_options.h): what join mode gets from
// them, torchrun's spellings and PET_ variables, and what is refused before anything starts.
#include <catch2/catch.hpp>

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cli/join_options.h"
#include "cli/options.h"
#include "common/error.h"
#include "tests/cli/parse_error.h"
#include "tests/support/processes.h"

using hvdrun::cli::parse_command_line;
using hvdrun::launcher::LauncherChoice;
using hvdrun::testing::error_of;
using Args = std::vector<std::string>;

TEST_CASE("torchrun's join flags make a join-mode job of nnodes times nproc-per-node ranks") {
  hvdrun::testing::TempDir dir("join-cli");
  const std::string secret = dir.path() + "/secret";
  hvdrun::testing::write_text(secret, "0123456789abcdef0123\n");
  const auto cmd = parse_command_line({"--nnodes",
                                       "3",
                                       "--node_rank",
                                       "2",
                                       "--rdzv-endpoint",
                                       "node-0.svc:1234",
                                       "--nproc-per-node",
                                       "4",
                                       "--rdzv_id",
                                       "j1",
                                       "--rdzv-backend",
                                       "c10d",
                                       "--rdzv-timeout",
                                       "60",
                                       "--secret-file",
                                       secret,
                                       "--max-restarts",
                                       "0",
                                       "train.py",
                                       "--lr",
                                       "1"});
  const auto& o = cmd.options;
  CHECK(o.join.enabled());
  CHECK(o.join.nnodes == 3);
  CHECK(o.join.node_rank == 2);
  CHECK(o.join.endpoint_host == "node-0.svc");
  CHECK(o.join.endpoint_port == 1234);
  CHECK(o.join.run_id == "j1");
  CHECK(o.join.timeout_s == 60);
  CHECK(o.join.secret == "0123456789abcdef0123");
  CHECK(o.launcher.kind == LauncherChoice::join);
  CHECK(o.np == 12);
  REQUIRE(o.hosts.size() == 3);
  CHECK(o.hosts[2].name == "node2");
  CHECK(o.hosts[2].slots == 4);
  CHECK_FALSE(o.elastic.enabled());
  CHECK(o.command == Args{"python3", "train.py", "--lr", "1"});
  CHECK(o.env == Args{"TORCHELASTIC_RUN_ID=j1", "TORCHELASTIC_RESTART_COUNT=0",
                      "TORCHELASTIC_MAX_RESTARTS=0", "TORCHELASTIC_USE_AGENT_STORE=False"});

  // torchrun's other forms: --master-addr/--master-port, -m, --no-python, one node.
  const auto m = parse_command_line({"--nnodes", "2", "--node-rank", "0", "--master-addr",
                                     "10.1.2.3", "--master-port", "29511", "--secret-file", secret,
                                     "-m", "pkg.train", "--epochs", "2"});
  CHECK(m.options.join.endpoint_host == "10.1.2.3");
  CHECK(m.options.join.endpoint_port == 29511);
  CHECK(m.options.command == Args{"python3", "-m", "pkg.train", "--epochs", "2"});
  const auto one =
      parse_command_line({"--standalone", "--nproc-per-node", "3", "--no-python", "./a.py"});
  CHECK_FALSE(one.options.join.enabled());
  CHECK(one.options.np == 3);
  CHECK(one.options.command == Args{"./a.py"});
  // --standalone without --rdzv-id: a random UUID names the run, as torchrun's does.
  const std::string& id = one.options.env.at(0);
  CHECK(id.size() == std::string("TORCHELASTIC_RUN_ID=").size() + 36);
  CHECK(id.substr(id.size() - 36 + 14, 1) == "4");
  // One node with an endpoint (torchrun's single-node c10d line): a local job, no secret.
  ::unsetenv("HVDRUN_JOB_SECRET");
  const auto c10d = parse_command_line({"--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend",
                                        "c10d", "--rdzv_endpoint", "127.0.0.1:29400", "t.py"});
  CHECK_FALSE(c10d.options.join.enabled());
  CHECK(c10d.options.np == 2);
  CHECK(c10d.options.hosts.empty());
  CHECK_THAT(error_of({"--nnodes", "1", "--node-rank", "1", "--rdzv-endpoint", "n0", "true"}),
             Catch::Contains("--node-rank 1 with --nnodes 1: one node is node rank 0"));
  CHECK(hvdrun::cli::pet_variable("nproc-per-node") == "PET_NPROC_PER_NODE");
}

TEST_CASE("what join mode does not support is refused before anything starts") {
  ::unsetenv("HVDRUN_JOB_SECRET");
  const Args base = {"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "n0:1"};
  auto with = [&](Args extra) {
    Args a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    a.emplace_back("true");
    return error_of(a);
  };
  CHECK_THAT(with({}), Catch::Contains("join mode needs the job's secret on every node") &&
                           Catch::Contains("--secret-file FILE, or set HVDRUN_JOB_SECRET"));
  ::setenv("HVDRUN_JOB_SECRET", "short", 1);
  CHECK_THAT(with({}), Catch::Contains("HVDRUN_JOB_SECRET has 5 characters, fewer than 16"));
  ::setenv("HVDRUN_JOB_SECRET", "a-long-enough-job-secret", 1);
  CHECK(with({}) == "<no error>");
  CHECK_THAT(with({"--rdzv-backend", "etcd"}), Catch::Contains("--rdzv-backend 'etcd' is not"));
  CHECK_THAT(with({"--max-restarts", "3"}),
             Catch::Contains("--max-restarts 3: a job of a fixed number of nodes") &&
                 Catch::Contains("or give --nnodes MIN:MAX"));
  CHECK_THAT(with({"-np", "2"}), Catch::Contains("-np and -H/--hostfile cannot be combined"));
  CHECK_THAT(with({"-np", "auto"}),
             Catch::Contains(
                 "-np auto cannot be combined with torchrun's flags: give --nproc-per-node gpu"));
  CHECK_THAT(with({"--launcher", "ssh"}), Catch::Contains("--launcher cannot be combined"));
  CHECK_THAT(with({"--nproc-per-node", "xpu"}),
             Catch::Contains("--nproc-per-node xpu is not supported"));
  CHECK_THAT(with({"--master-addr", "x"}), Catch::Contains("both name node 0; give one of them"));
  CHECK_THAT(error_of({"--nnodes", "2", "--node-rank", "1", "true"}),
             Catch::Contains("needs node 0's address on every node: --rdzv-endpoint HOST:PORT"));
  CHECK_THAT(error_of({"--nnodes", "2", "--rdzv-endpoint", "n0", "true"}),
             Catch::Contains("needs this node's --node-rank"));
  CHECK_THAT(error_of({"--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "n0", "true"}),
             Catch::Contains("bad value '2' for --node-rank"));
  CHECK_THAT(error_of({"--standalone", "--nnodes", "2", "true"}),
             Catch::Contains("--standalone runs one node"));
  // More ranks than a job may have: every node says so, not only node 0.
  CHECK_THAT(error_of({"--nnodes", "1000", "--node-rank", "1", "--rdzv-endpoint", "n0:1",
                       "--nproc-per-node", "4096", "true"}),
             Catch::Contains("the nodes' --nproc-per-node counts add up to more than 1048576 "
                             "ranks, more than a job may have"));
  // torchrun's flags that hvdrun does not take say what to do instead, in either spelling.
  CHECK_THAT(error_of({"--standalone", "--rdzv_conf", "join_timeout=5", "true"}),
             Catch::Contains("torchrun's --rdzv-conf is not supported: its join_timeout is "
                             "hvdrun's --rdzv-timeout SEC"));
  CHECK_THAT(error_of({"--log-dir=/tmp/x", "true"}),
             Catch::Contains("torchrun's --log-dir is not supported: node 0 prints"));
  for (const char* flag : {"--redirects", "--tee", "--monitor_interval", "--role", "--local_addr",
                           "--run_path", "--start_method"}) {
    std::string dashed(flag);
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    const std::string error = error_of({flag, "x", "true"});
    CHECK_THAT(error, Catch::StartsWith("torchrun's " + dashed + " is not supported: "));
    // What was wrong, then what to do, as every command-line error says it.
    CHECK_THAT(error, Catch::Contains("; "));
  }
  // torchrun's PET_ variables stand in for flags not given (a PyTorchJob sets them).
  ::setenv("PET_NNODES", "2", 1);
  ::setenv("PET_NODE_RANK", "1", 1);
  ::setenv("PET_MASTER_ADDR", "n0", 1);
  const auto pet = parse_command_line({"--nproc-per-node", "2", "true"});
  CHECK(pet.options.join.nnodes == 2);
  CHECK(pet.options.join.node_rank == 1);
  CHECK(pet.options.join.endpoint_host == "n0");
  CHECK(pet.options.join.endpoint_port == 29500);
  for (const char* v : {"PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR", "HVDRUN_JOB_SECRET"})
    ::unsetenv(v);
}

TEST_CASE(
    "join mode's --nproc-per-node gpu, cpu and auto count this node's GPUs or CPUs, as torchrun "
    "does") {
  // Restores the variables the case sets, whatever they held.
  struct Saved {
    std::string name;
    std::optional<std::string> value;
    explicit Saved(std::string n) : name(std::move(n)) {
      if (const char* v = std::getenv(name.c_str())) value = v;
    }
    ~Saved() {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  } fake("HVDRUN_FAKE_GPUS"), visible("CUDA_VISIBLE_DEVICES"), secret("HVDRUN_JOB_SECRET");
  ::setenv("HVDRUN_JOB_SECRET", "a-long-enough-job-secret", 1);
  const auto job = [](const std::string& word) {
    return parse_command_line({"--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "n0:1",
                               "--nproc-per-node", word, "true"})
        .options;
  };
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const int cpus = CPU_COUNT(&set);

  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::setenv("HVDRUN_FAKE_GPUS", "0,1,2", 1);
  auto o = job("gpu");
  CHECK(o.join.ranks_per_node == 3);
  CHECK(o.np == 6);
  REQUIRE(o.hosts.size() == 2);
  CHECK(o.hosts[1].slots == 3);
  CHECK_THAT(o.join.ranks_per_node_from, Catch::Contains("--nproc-per-node gpu: 3 from"));
  CHECK(job("auto").join.ranks_per_node == 3);
  CHECK(job("cpu").join.ranks_per_node == cpus);
  CHECK(job("4").join.ranks_per_node_from.empty());

  // CUDA_VISIBLE_DEVICES is what torch.cuda.device_count() sees: it wins.
  ::setenv("CUDA_VISIBLE_DEVICES", "1,3", 1);
  o = job("gpu");
  CHECK(o.join.ranks_per_node == 2);
  CHECK_THAT(o.join.ranks_per_node_from, Catch::Contains("CUDA_VISIBLE_DEVICES"));

  // No GPU: gpu is refused with what to do, auto falls back to the CPUs.
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  const Args none = {"--nnodes",         "2",   "--node-rank", "1", "--rdzv-endpoint", "n0:1",
                     "--nproc-per-node", "gpu", "true"};
  CHECK_THAT(error_of(none), Catch::Contains("--nproc-per-node gpu: this node has no GPU") &&
                                 Catch::Contains("--nproc-per-node cpu or auto"));
  o = job("auto");
  CHECK(o.join.ranks_per_node == cpus);
  CHECK_THAT(o.join.ranks_per_node_from, Catch::Contains("the CPUs this node may use"));
  // One node: a local job of that many ranks.
  const auto one = parse_command_line({"--standalone", "--nproc-per-node", "cpu", "true"});
  CHECK(one.options.np == cpus);
}

TEST_CASE("join mode's --nnodes MIN:MAX makes an elastic job of MAX nodes that needs MIN") {
  ::setenv("HVDRUN_JOB_SECRET", "a-long-enough-job-secret", 1);
  ::unsetenv("HVDRUN_JOIN_LAST_CALL");
  const auto job = [](const std::string& nnodes, const std::string& rank, Args extra = {}) {
    Args a = {"--nnodes",        nnodes, "--node-rank",      rank,
              "--rdzv-endpoint", "n0:1", "--nproc-per-node", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.emplace_back("true");
    return a;
  };
  const auto o = parse_command_line(job("2:4", "3")).options;
  CHECK(o.join.nnodes == 4);
  CHECK(o.join.min_nodes == 2);
  CHECK(o.join.elastic());
  CHECK(o.join.node_rank == 3);
  CHECK(o.join.last_call_s == 30);
  CHECK(o.np == 8);
  CHECK(o.hosts.size() == 4);
  // Node 0 runs the generations: elastic mode, in process only, at least MIN nodes' ranks.
  CHECK(o.elastic.enabled());
  CHECK(o.elastic.min_np == 4);
  CHECK_FALSE(o.elastic.max_np);
  CHECK_FALSE(o.elastic.restarts);
  CHECK_FALSE(o.elastic.reset_limit);
  // --max-restarts bounds the recoveries in process, and TORCHELASTIC_MAX_RESTARTS says it.
  const auto limited = parse_command_line(job("1:3", "0", {"--max-restarts", "5"})).options;
  CHECK(limited.elastic.reset_limit == 5);
  CHECK(limited.elastic.reset_limit_flag == "--max-restarts");
  CHECK(limited.join.min_nodes == 1);
  CHECK(std::find(limited.env.begin(), limited.env.end(), "TORCHELASTIC_MAX_RESTARTS=5") !=
        limited.env.end());
  // MIN equal to MAX is a fixed number of nodes; 1:1 one node, a local job.
  const auto fixed = parse_command_line(job("3:3", "1")).options;
  CHECK(fixed.join.nnodes == 3);
  CHECK_FALSE(fixed.join.elastic());
  CHECK_FALSE(fixed.elastic.enabled());
  const auto one = parse_command_line({"--nnodes", "1:1", "--nproc-per-node", "2", "true"});
  CHECK_FALSE(one.options.join.enabled());
  CHECK(one.options.np == 2);
  // The last call, from HVDRUN_JOIN_LAST_CALL.
  ::setenv("HVDRUN_JOIN_LAST_CALL", "0", 1);
  CHECK(parse_command_line(job("2:3", "1")).options.join.last_call_s == 0);
  ::setenv("HVDRUN_JOIN_LAST_CALL", "soon", 1);
  CHECK_THAT(error_of(job("2:3", "1")),
             Catch::Contains("bad value 'soon' for HVDRUN_JOIN_LAST_CALL; expected whole seconds"));
  ::unsetenv("HVDRUN_JOIN_LAST_CALL");
  // Bad ranges, node ranks past MAX, and what a range cannot be combined with.
  CHECK_THAT(error_of(job("3:2", "1")),
             Catch::Contains("--nnodes 3:2: MIN 3 is above MAX 2; give MIN:MAX with MIN no more "
                             "than MAX"));
  for (const char* bad : {"0:2", "2:", ":3", "1:100001", "a:b", "1:2:3"})
    CHECK_THAT(error_of(job(bad, "1")),
               Catch::Contains("for --nnodes; expected N or MIN:MAX, whole numbers from 1 to "
                               "100000, as in --nnodes 2:4"));
  CHECK_THAT(error_of(job("2:3", "3")),
             Catch::Contains("bad value '3' for --node-rank") && Catch::Contains("from 0 to 2"));
  CHECK_THAT(error_of({"--nnodes", "2:3", "--rdzv-endpoint", "n0:1", "true"}),
             Catch::Contains("--nnodes 2:3 needs this node's --node-rank"));
  CHECK_THAT(error_of({"--nnodes", "2:3", "--node-rank", "1", "true"}),
             Catch::Contains("--nnodes 2:3 needs node 0's address on every node"));
  CHECK_THAT(error_of(job("2:3", "1", {"--min-np", "2"})),
             Catch::Contains("elastic options cannot be combined with torchrun's flags") &&
                 Catch::Contains("--nnodes MIN:MAX makes a join-mode job elastic"));
  ::unsetenv("HVDRUN_JOB_SECRET");
}
