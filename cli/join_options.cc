// torchrun's flags and join mode's: the node count, this node's rank, node 0's endpoint,
// the job's secret, and torchrun's ways of naming the program (-m, --no-python).
#include "cli/join_options.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "common/env_names.h"
#include "common/error.h"
#include "common/quote.h"
#include "common/whole_number.h"
#include "hostfile/hosts.h"
#include "launcher/plan/join_layout.h"
#include "launcher/plan/rank_devices.h"
#include "launcher/topology/topology.h"

namespace hvdrun::cli {
namespace {

constexpr long kMaxNodes = 100000;
constexpr long kMaxPerNode = 4096;
constexpr std::size_t kMinSecret = 16;
constexpr const char* kSecretVar = "HVDRUN_JOB_SECRET";
constexpr const char* kLastCallVar = "HVDRUN_JOIN_LAST_CALL";

int number(const GivenFlags& g, const char* name, long lo, long hi, const char* example) {
  const std::string& text = g.at(name);
  auto v = parse_whole_number(text, lo, hi);
  if (!v) {
    throw UsageError("bad value " + quote(text) + " for --" + name + "; expected a whole number " +
                     "from " + std::to_string(lo) + " to " + std::to_string(hi) + ", as in " +
                     example);
  }
  return static_cast<int>(*v);
}

// HOST[:PORT]; IPv4 or a name (join mode reaches node 0 over IPv4).
void parse_endpoint(const std::string& text, int default_port, launcher::JoinOptions& j) {
  if (!text.empty() && text.front() == '[')
    throw UsageError("--rdzv-endpoint " + quote(text) +
                     ": join mode reaches node 0 over IPv4 only for now; give its name or IPv4 "
                     "address");
  const auto colon = text.rfind(':');
  j.endpoint_host = text.substr(0, colon);
  j.endpoint_port = default_port;
  if (colon != std::string::npos) {
    auto port = parse_whole_number(text.substr(colon + 1), 1, 65535);
    if (!port)
      throw UsageError("bad port in --rdzv-endpoint " + quote(text) +
                       "; expected HOST:PORT with a port from 1 to 65535, as in node-0:29400");
    j.endpoint_port = static_cast<int>(*port);
  }
  if (j.endpoint_host.empty())
    throw UsageError("--rdzv-endpoint " + quote(text) + " names no host; expected HOST:PORT");
}

std::string read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError("--secret-file " + quote(path) +
                     " cannot be read; give a readable file holding the job's secret");
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// The secret every node proves: --secret-file, else HVDRUN_JOB_SECRET (which no rank must
// inherit, so it leaves this process's environment).
std::string job_secret(const GivenFlags& g, const char* secret_env) {
  std::string secret;
  std::string from;
  if (g.count("secret-file") != 0) {
    secret = read_secret_file(g.at("secret-file"));
    from = "--secret-file " + quote(g.at("secret-file"));
  } else if (secret_env != nullptr) {
    secret = secret_env;
    from = kSecretVar;
  }
  if (from.empty())
    throw UsageError(std::string("join mode needs the job's secret on every node, and none is "
                                 "given; write one to a file on every node (e.g. head -c 32 "
                                 "/dev/urandom | base64 > secret) and pass --secret-file FILE, "
                                 "or set ") +
                     kSecretVar + " (in Kubernetes from a Secret: docs/kubernetes.md)");
  if (secret.size() < kMinSecret)
    throw UsageError("the job's secret from " + from + " has " + std::to_string(secret.size()) +
                     " characters, fewer than " + std::to_string(kMinSecret) +
                     "; use a random one, e.g. head -c 32 /dev/urandom | base64");
  return secret;
}

// The GPUs this node's ranks would take one each: --gpus-per-rank's list (rank_devices.h),
// CUDA_VISIBLE_DEVICES, else the GPUs hwloc finds, else HVDRUN_FAKE_GPUS. `where` says
// which, or why none were found.
std::size_t local_gpus(const char* (*getenv)(const char*), std::string& where) {
  std::vector<std::string> env;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", launcher::kFakeGpusVar})
    if (const char* value = getenv(name)) env.push_back(std::string(name) + "=" + value);
  launcher::HostTopology here;
  std::string unread;
  if (!launcher::env_value(env, "CUDA_VISIBLE_DEVICES")) {
    try {
      here = launcher::load_host_topology();
    } catch (const std::exception& e) {
      unread = std::string(" (hwloc could not read this machine: ") + e.what() + ")";
    }
  }
  const std::size_t n = launcher::host_gpu_ids(here, env, &where).size();
  where += unread;
  return n;
}

// The CPUs this process may run on (a Slurm step's or a container's, not the machine's).
std::size_t allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
}

// torchrun's --nproc-per-node: a number, or `gpu` (one rank per GPU of this node), `cpu`
// (one per CPU it may run on) or `auto` (gpu where the node has GPUs, else cpu). `from`
// says how a word was counted, empty for a number: node 0 lets the nodes' counts differ only
// when every node counted its own, and quotes `from` when it refuses a node.
int per_node(const GivenFlags& g, const char* (*getenv)(const char*), std::string& from) {
  if (g.count("nproc-per-node") == 0) return 1;
  const std::string& v = g.at("nproc-per-node");
  if (v != "gpu" && v != "auto" && v != "cpu") {
    if (v == "xpu")
      throw UsageError(
          "--nproc-per-node xpu is not supported: hvdrun counts CUDA GPUs and CPUs; give a "
          "number, or gpu, cpu or auto");
    return number(g, "nproc-per-node", 1, kMaxPerNode, "--nproc-per-node 8");
  }
  std::size_t n = 0;
  std::string where;
  if (v != "cpu") n = local_gpus(getenv, where);
  if (v == "gpu" && n == 0)
    throw UsageError("--nproc-per-node gpu: this node has no GPU (looked in " + where +
                     "); give the number of ranks, or --nproc-per-node cpu or auto");
  if (n == 0) {
    n = allowed_cpus();
    where = "the CPUs this node may use";
  }
  n = std::min<std::size_t>(n, kMaxPerNode);
  from = "--nproc-per-node " + v + ": " + std::to_string(n) + " from " + where;
  return static_cast<int>(n);
}

// What torchrun has and hvdrun's join mode does not: refused with what to do instead.
void refuse_unsupported(const GivenFlags& g, const launcher::LaunchOptions& o) {
  if (g.count("rdzv-backend") != 0) {
    const std::string& b = g.at("rdzv-backend");
    if (b != "c10d" && b != "static")
      throw UsageError("--rdzv-backend " + quote(b) +
                       " is not supported: node 0's hvdrun holds the rendezvous; drop "
                       "--rdzv-backend (c10d and static are accepted and mean the same)");
  }
  const bool range = g.count("nnodes") != 0 && g.at("nnodes").find(':') != std::string::npos;
  if (!range && o.elastic.reset_limit && *o.elastic.reset_limit > 0)
    throw UsageError(o.elastic.reset_limit_flag + " " + std::to_string(*o.elastic.reset_limit) +
                     ": a job of a fixed number of nodes started with torchrun's flags does not "
                     "restart; drop it (or give 0), or give --nnodes MIN:MAX, whose job recovers "
                     "in process up to that many times");
  if (!o.elastic.discovery_script.empty() || o.elastic.min_np.value_or(1) != 1 || o.elastic.max_np)
    throw UsageError(
        "elastic options cannot be combined with torchrun's flags; drop --min-np, --max-np and "
        "--host-discovery-script (--nnodes MIN:MAX makes a join-mode job elastic)");
  if (o.np_auto)
    throw UsageError(
        "-np auto cannot be combined with torchrun's flags: give --nproc-per-node gpu, and each "
        "node runs one rank per GPU it has");
  if (o.np || !o.hosts.empty())
    throw UsageError(
        "-np and -H/--hostfile cannot be combined with torchrun's flags: the job has "
        "--nproc-per-node ranks on each of --nnodes nodes; drop -np and -H/--hostfile");
  if (o.launcher.kind != launcher::LauncherChoice::automatic)
    throw UsageError(
        "--launcher cannot be combined with torchrun's flags: every node starts its own "
        "hvdrun; drop --launcher");
}

// node 0's endpoint from --rdzv-endpoint, or --master-addr and --master-port.
void endpoint(const GivenFlags& g, launcher::JoinOptions& j) {
  const bool master = g.count("master-addr") != 0 || g.count("master-port") != 0;
  if (g.count("rdzv-endpoint") != 0 && master)
    throw UsageError(
        "--rdzv-endpoint and --master-addr/--master-port both name node 0; give one of them");
  if (g.count("rdzv-endpoint") != 0) return parse_endpoint(g.at("rdzv-endpoint"), 29400, j);
  if (g.count("master-addr") == 0) return;
  parse_endpoint(g.at("master-addr"), 29500, j);
  if (g.count("master-port") != 0)
    j.endpoint_port = number(g, "master-port", 1, 65535, "--master-port 29500");
}

// torchrun's program forms: -m (the command is a module), a .py script under python3,
// --no-python as given.
void program(const GivenFlags& g, std::vector<std::string>& command) {
  if (g.count("module") != 0) {
    if (g.count("no-python") != 0)
      throw UsageError("-m runs a Python module, --no-python runs the command as given; give one");
    if (!command.empty()) command.insert(command.begin(), {"python3", "-m"});
    return;
  }
  if (g.count("no-python") != 0 || command.empty()) return;
  const std::string& first = command.front();
  if (first.size() > 3 && first.compare(first.size() - 3, 3, ".py") == 0)
    command.insert(command.begin(), "python3");
}

// Flags not given take their PET_ variables (torchrun's, set by a PyTorchJob).
void take_pet_variables(GivenFlags& g, const char* (*getenv)(const char*)) {
  const auto names_node0 = [](const std::string& n) {
    return n == "rdzv-endpoint" || n == "master-addr" || n == "master-port";
  };
  // Node 0 named on the command line is named there only, whatever the variables say.
  const bool node0_given =
      std::any_of(g.begin(), g.end(), [&](const auto& f) { return names_node0(f.first); });
  for (const char* name : join_flag_names()) {
    if (g.count(name) != 0 || std::string(name) == "secret-file") continue;
    if (node0_given && names_node0(name)) continue;
    const char* v = getenv(pet_variable(name).c_str());
    if (v == nullptr || *v == '\0') continue;
    const std::string value(v);
    const std::string n(name);
    const bool is_switch = n == "standalone" || n == "no-python" || n == "module";
    if (is_switch && value != "1" && value != "true" && value != "True") continue;
    g[name] = is_switch ? std::string() : value;
  }
}

// --nnodes N, or MIN:MAX (elastic join): the most nodes, and in `min` the fewest (0
// without a range, or when MIN is MAX).
int node_count(const GivenFlags& g, int& min) {
  min = 0;
  if (g.count("nnodes") == 0) return 1;
  const std::string& text = g.at("nnodes");
  const auto colon = text.find(':');
  if (colon == std::string::npos) return number(g, "nnodes", 1, kMaxNodes, "--nnodes 4");
  const auto lo = parse_whole_number(text.substr(0, colon), 1, kMaxNodes);
  const auto hi = parse_whole_number(text.substr(colon + 1), 1, kMaxNodes);
  if (!lo || !hi)
    throw UsageError("bad value " + quote(text) +
                     " for --nnodes; expected N or MIN:MAX, whole numbers from 1 to " +
                     std::to_string(kMaxNodes) + ", as in --nnodes 2:4");
  if (*lo > *hi)
    throw UsageError("--nnodes " + text + ": MIN " + std::to_string(*lo) + " is above MAX " +
                     std::to_string(*hi) +
                     "; give MIN:MAX with MIN no more than MAX, as in "
                     "--nnodes 2:4");
  if (*lo < *hi) min = static_cast<int>(*lo);
  return static_cast<int>(*hi);
}

// Elastic join (--nnodes MIN:MAX, docs/kubernetes.md): node 0 runs the job in elastic mode,
// recovering in process only (the other nodes' hvdrun cannot be started again), at least
// MIN nodes' ranks, each node's at least one; --max-restarts bounds the recoveries.
void elastic_join(int min_nodes, int nproc, std::optional<int> reset_limit,
                  launcher::LaunchOptions& o, const char* (*getenv)(const char*)) {
  launcher::JoinOptions& j = o.join;
  j.min_nodes = min_nodes;
  if (const char* v = getenv(kLastCallVar); v != nullptr && *v != '\0') {
    const auto s = parse_whole_number(v, 0, env_names::kMaxStartTimeoutS);
    if (!s)
      throw UsageError("bad value " + quote(v) + " for " + kLastCallVar +
                       "; expected whole seconds from 0 to " +
                       std::to_string(env_names::kMaxStartTimeoutS) + ", as in 30");
    j.last_call_s = static_cast<int>(*s);
  }
  launcher::ElasticOptions& e = o.elastic;
  e.min_np = j.ranks_per_node_from.empty() ? min_nodes * nproc : min_nodes;
  e.restarts = false;
  e.reset_limit = reset_limit;
  e.reset_limit_flag = "--max-restarts";
  for (std::string& v : o.env) {
    if (v.rfind("TORCHELASTIC_MAX_RESTARTS=", 0) == 0 && reset_limit)
      v = "TORCHELASTIC_MAX_RESTARTS=" + std::to_string(*reset_limit);
  }
}

// torchrun's name for a run without --rdzv-id under --standalone: a random UUID (version 4).
std::string random_run_id() {
  std::random_device rd;
  std::string hex;
  for (int i = 0; i < 4; ++i) {
    char word[9];
    std::snprintf(word, sizeof word, "%08x", static_cast<unsigned>(rd()));
    hex += word;
  }
  hex[12] = '4';                                                    // version 4
  hex[16] = "89ab"[std::stoi(hex.substr(16, 1), nullptr, 16) & 3];  // RFC 4122 variant
  return hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20);
}

// The variables torchrun's agent gives every worker besides the rank's coordinates (those
// come from compat/env.h in every hvdrun job): the run's id, and no restarts. The ranks'
// store is rank 0's own (MASTER_PORT is a port of its own, not the endpoint's), so
// TORCHELASTIC_USE_AGENT_STORE is False, whatever the pod's environment says.
void torchrun_variables(const std::string& run_id, std::vector<std::string>& env) {
  env.push_back("TORCHELASTIC_RUN_ID=" + run_id);
  env.emplace_back("TORCHELASTIC_RESTART_COUNT=0");
  env.emplace_back("TORCHELASTIC_MAX_RESTARTS=0");
  env.emplace_back("TORCHELASTIC_USE_AGENT_STORE=False");
}

// torchrun's flags that hvdrun does not take, each with what to do instead.
constexpr std::pair<const char*, const char*> kTorchrunOnly[] = {
    {"--rdzv-conf",
     "its join_timeout is hvdrun's --rdzv-timeout SEC; its other keys have no counterpart"},
    {"--log-dir",
     "node 0 prints every rank's output tagged [RANK]<stdout>; --output-filename DIR also "
     "writes it to a file per rank"},
    {"--redirects", "every rank's output reaches node 0 tagged by rank; drop it"},
    {"--tee", "every rank's output reaches node 0 tagged by rank; drop it"},
    {"--monitor-interval", "hvdrun learns of a rank's exit at once; drop it"},
    {"--role", "every rank's ROLE_NAME is 'default'; drop it"},
    {"--local-addr",
     "--network-interface IF chooses the address a node is reached at; drop --local-addr"},
    {"--run-path", "a command ending in .py runs under python3; drop --run-path"},
    {"--start-method", "every rank is a process of its own; drop it"},
};

}  // namespace

std::string torchrun_flag_advice(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  for (const auto& [flag, advice] : kTorchrunOnly) {
    if (name == flag) return "torchrun's " + name + " is not supported: " + advice;
  }
  return {};
}

const std::vector<const char*>& join_flag_names() {
  static const std::vector<const char*> names = {
      "nnodes",       "node-rank",    "nproc-per-node", "rdzv-endpoint", "rdzv-id",
      "rdzv-backend", "rdzv-timeout", "master-addr",    "master-port",   "standalone",
      "no-python",    "module",       "secret-file"};
  return names;
}

std::string pet_variable(const std::string& name) {
  std::string out = "PET_";
  for (char c : name)
    out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void apply_join(GivenFlags g, launcher::LaunchOptions& o, std::vector<std::string>& command,
                const char* (*getenv)(const char*)) {
  if (g.empty()) return;
  take_pet_variables(g, getenv);
  refuse_unsupported(g, o);
  const std::optional<int> reset_limit = o.elastic.reset_limit;
  o.elastic = {};  // --max-restarts 0: no restarts, as without it
  program(g, command);
  launcher::JoinOptions& j = o.join;
  const int nproc = per_node(g, getenv, j.ranks_per_node_from);
  const bool standalone = g.count("standalone") != 0;
  int min_nodes = 0;
  const int nnodes = node_count(g, min_nodes);
  if (g.count("rdzv-id") != 0)
    j.run_id = g.at("rdzv-id");
  else if (standalone)
    j.run_id = random_run_id();
  torchrun_variables(j.run_id, o.env);
  endpoint(g, j);
  if (standalone && (nnodes != 1 || !j.endpoint_host.empty()))
    throw UsageError(
        "--standalone runs one node with its own rendezvous; drop --nnodes and "
        "--rdzv-endpoint/--master-addr, or drop --standalone");
  if (nnodes == 1) {
    // One node: a local job of nproc ranks. No other node joins, so an endpoint (which
    // names this node) is not listened on, and no secret is needed.
    if (g.count("node-rank") != 0 && g.at("node-rank") != "0")
      throw UsageError("--node-rank " + g.at("node-rank") +
                       " with --nnodes 1: one node is node rank 0; drop --node-rank or give "
                       "--nnodes with the number of nodes");
    j = {};  // not join mode
    o.np = nproc;
    return;
  }
  const std::string& nnodes_text = g.at("nnodes");  // more than one node: given
  if (j.endpoint_host.empty())
    throw UsageError("--nnodes " + nnodes_text +
                     " needs node 0's address on every node: --rdzv-endpoint HOST:PORT (or "
                     "--master-addr HOST --master-port PORT)");
  if (g.count("node-rank") == 0)
    throw UsageError("--nnodes " + nnodes_text +
                     " needs this node's --node-rank (0 on node 0, the endpoint's node; 1 to " +
                     std::to_string(nnodes - 1) + " on the others)");
  j.node_rank = number(g, "node-rank", 0, nnodes - 1, "--node-rank 1");
  if (g.count("rdzv-timeout") != 0)
    j.timeout_s = number(g, "rdzv-timeout", 1, env_names::kMaxStartTimeoutS, "--rdzv-timeout 900");
  j.secret = job_secret(g, getenv(kSecretVar));
  j.nnodes = nnodes;
  o.launcher.kind = launcher::LauncherChoice::join;
  // Every node with this node's count: the plan as far as this node knows it. Node 0 lays
  // the ranks out again from the counts the other nodes' hellos carry.
  o = launcher::laid_out(o, launcher::join_layout(std::vector<int>(nnodes, nproc)));
  j.ranks_per_node = nproc;
  if (min_nodes > 0) elastic_join(min_nodes, nproc, reset_limit, o, getenv);
}

}  // namespace hvdrun::cli
