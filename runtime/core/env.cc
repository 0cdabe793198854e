// Parsing of the HVDRUN_* environment contract (see env.h).
#include "runtime/core/env.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <vector>

#include "common/env_names.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

namespace {

class Parser {
 public:
  explicit Parser(const std::function<const char*(const char*)>& getenv) : getenv_(getenv) {}

  std::optional<std::string> text(const char* name, bool required) {
    const char* v = getenv_(name);
    if (v == nullptr || *v == '\0') {
      if (required) missing_.emplace_back(name);
      return std::nullopt;
    }
    if (required) present_.emplace_back(name);
    return std::string(v);
  }

  template <typename T>
  std::optional<T> number(const char* name, bool required, long long lo, long long hi) {
    auto s = text(name, required);
    if (!s) return std::nullopt;
    long long v = 0;
    auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
    if (ec != std::errc() || p != s->data() + s->size() || v < lo || v > hi) {
      garbled_.push_back(std::string(name) + "='" + *s + "' (expected an integer in [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "])");
      return std::nullopt;
    }
    return static_cast<T>(v);
  }

  void garbled(std::string what) { garbled_.push_back(std::move(what)); }

  void finish() const {
    if (missing_.empty() && garbled_.empty()) return;
    std::string msg = missing_.empty()
                          ? "hvdrun: this process's hvdrun environment is invalid:"
                          : "hvdrun: this process has only part of the environment hvdrun gives "
                            "a rank (it was not started by hvdrun, or its environment was "
                            "changed):";
    if (!missing_.empty()) {
      msg += " missing";
      for (std::size_t i = 0; i < missing_.size(); ++i) msg += (i ? ", " : " ") + missing_[i];
      msg += ";";
    }
    for (const auto& g : garbled_) msg += " invalid " + g + ";";
    msg += " run it as `hvdrun -np N ... <program>`, which sets these for every rank";
    // A process with none of them runs as a single process (read_environment).
    if (!missing_.empty()) {
      msg += ", or unset";
      for (std::size_t i = 0; i < present_.size(); ++i) msg += (i ? ", " : " ") + present_[i];
      msg += " to run it as a single process";
    }
    throw Error(msg);
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
  std::vector<std::string> missing_;
  std::vector<std::string> present_;  // the required ones that are set
  std::vector<std::string> garbled_;
};

// The variables that make a process a rank of a job: all of them, or (a program started
// without hvdrun) none.
constexpr std::array<const char*, 10> kJobVariables = {
    env_names::kRank,      env_names::kSize,           env_names::kLocalRank,
    env_names::kLocalSize, env_names::kCrossRank,      env_names::kCrossSize,
    env_names::kHostname,  env_names::kRendezvousAddr, env_names::kRendezvousPort,
    env_names::kSecret};

// Another launcher's sign that this process is one of several it started: each copy
// running alone would train the same model side by side, without a word. Refused.
void refuse_other_launchers_job(const std::function<const char*(const char*)>& getenv) {
  struct Sign {
    const char* variable;
    const char* launcher;
  };
  static constexpr std::array<Sign, 5> kSigns = {{
      {"HOROVOD_SIZE", "horovodrun"},
      {"OMPI_COMM_WORLD_SIZE", "mpirun"},
      {"PMI_SIZE", "an MPI launcher"},
      {"SLURM_STEP_NUM_TASKS", "srun"},
      {"WORLD_SIZE", "torchrun"},
  }};
  for (const auto& sign : kSigns) {
    const char* v = getenv(sign.variable);
    if (v == nullptr) continue;
    long long n = 0;
    const std::string_view text(v);
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || p != text.data() + text.size() || n <= 1) continue;
    throw Error("hvdrun: this process is one of " + std::to_string(n) + " started by " +
                sign.launcher + " (" + sign.variable + "=" + std::string(text) +
                "), not by hvdrun, so it cannot reach its peers: run the program as `hvdrun -np " +
                std::to_string(n) + " ... <program>` instead (once, not under " + sign.launcher +
                "), or unset " + sign.variable + " to run it as a single process");
  }
}

}  // namespace

Environment read_environment(const std::function<const char*(const char*)>& getenv) {
  // None of the job's variables: a program started on its own (an IDE, pdb, plain
  // `python train.py`) runs as a single process, rank 0 of 1, as under Horovod.
  const bool in_job = std::any_of(kJobVariables.begin(), kJobVariables.end(), [&](const char* n) {
    const char* v = getenv(n);
    return v != nullptr && *v != '\0';
  });
  if (!in_job) refuse_other_launchers_job(getenv);
  Parser p(getenv);
  Environment e;
  auto rank = p.number<int>(env_names::kRank, in_job, 0, env_names::kMaxRanks - 1);
  auto size = p.number<int>(env_names::kSize, in_job, 1, env_names::kMaxRanks);
  auto lrank = p.number<int>(env_names::kLocalRank, in_job, 0, env_names::kMaxRanks - 1);
  auto lsize = p.number<int>(env_names::kLocalSize, in_job, 1, env_names::kMaxRanks);
  auto crank = p.number<int>(env_names::kCrossRank, in_job, 0, env_names::kMaxRanks - 1);
  auto csize = p.number<int>(env_names::kCrossSize, in_job, 1, env_names::kMaxRanks);
  auto host = p.text(env_names::kHostname, in_job);
  auto addr = p.text(env_names::kRendezvousAddr, in_job);
  auto port = p.number<std::uint16_t>(env_names::kRendezvousPort, in_job, 1, 65535);
  auto secret = p.text(env_names::kSecret, in_job);
  auto start = p.number<int>(env_names::kStartTimeout, false, 1, env_names::kMaxStartTimeoutS);
  auto op = p.number<int>(env_names::kOpTimeout, false, 1, env_names::kMaxOpTimeoutS);
  auto gen = p.number<int>(env_names::kGeneration, false, 0, env_names::kMaxGeneration);
  auto control = p.number<int>(env_names::kControlFd, false, 3, 1 << 20);
  auto joining = p.number<int>(env_names::kJoining, false, 0, 1);
  auto nccl = p.text(env_names::kNccl, false);
  auto host_path = p.text(env_names::kHostPath, false);
  auto checkin = p.text(env_names::kCheckin, false);
  auto stall_check = p.number<int>("HOROVOD_STALL_CHECK_TIME_SECONDS", false, 1, 1 << 24);
  auto stall_shutdown = p.number<int>("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", false, 0, 1 << 24);
  auto stall_disable = p.text("HOROVOD_STALL_CHECK_DISABLE", false);

  if (rank && size && *rank >= *size)
    p.garbled("HVDRUN_RANK=" + std::to_string(*rank) +
              " (not below HVDRUN_SIZE=" + std::to_string(*size) + ")");
  if (lrank && lsize && *lrank >= *lsize)
    p.garbled("HVDRUN_LOCAL_RANK=" + std::to_string(*lrank) +
              " (not below HVDRUN_LOCAL_SIZE=" + std::to_string(*lsize) + ")");
  if (crank && csize && *crank >= *csize)
    p.garbled("HVDRUN_CROSS_RANK=" + std::to_string(*crank) +
              " (not below HVDRUN_CROSS_SIZE=" + std::to_string(*csize) + ")");
  if (secret && (secret->size() < 32 || secret->size() % 2 != 0 ||
                 secret->find_first_not_of("0123456789abcdefABCDEF") != std::string::npos))
    p.garbled("HVDRUN_SECRET (expected the hex string hvdrun generated, at least 32 digits)");
  if (nccl && *nccl != "auto" && *nccl != "require" && *nccl != "off")
    p.garbled("HVDRUN_NCCL='" + *nccl + "' (expected auto, require or off)");
  if (host_path && *host_path != "auto" && *host_path != "shm" && *host_path != "gloo")
    p.garbled("HVDRUN_HOST_PATH='" + *host_path + "' (expected auto, shm or gloo)");
  if (checkin && *checkin != "auto" && *checkin != "rank" && *checkin != "host")
    p.garbled("HVDRUN_CHECKIN='" + *checkin + "' (expected auto, rank or host)");
  p.finish();

  if (in_job) {
    e.rank = *rank;
    e.size = *size;
    e.local_rank = *lrank;
    e.local_size = *lsize;
    e.cross_rank = *crank;
    e.cross_size = *csize;
    e.hostname = *host;
    e.rendezvous_addr = *addr;
    e.rendezvous_port = *port;
    e.secret = *secret;
  } else {
    e.standalone = true;
    e.hostname = "localhost";
  }
  if (start) e.start_timeout = std::chrono::seconds(*start);
  if (op) e.op_timeout = std::chrono::seconds(*op);
  if (gen) e.generation = *gen;
  if (control) e.control_fd = *control;
  e.joining = in_job && joining && *joining == 1;
  if (nccl) e.nccl_mode = *nccl;
  if (host_path) e.host_path = *host_path;
  if (checkin) e.checkin = *checkin;
  if (stall_check) e.stall_check = std::chrono::seconds(*stall_check);
  if (stall_shutdown) e.stall_shutdown = std::chrono::seconds(*stall_shutdown);
  e.stall_disabled = stall_disable && !stall_disable->empty() && *stall_disable != "0" &&
                     *stall_disable != "false";
  return e;
}

Environment alone(Environment env) {
  env.rank = env.local_rank = env.cross_rank = 0;
  env.size = env.local_size = env.cross_size = 1;
  env.rendezvous_addr.clear();
  env.rendezvous_port = 0;
  env.secret.clear();
  env.standalone = true;
  env.alone = true;
  env.incarnation = 0;
  return env;
}

Environment placed(Environment env, const control::Placement& placement) {
  env.generation = placement.generation;
  env.rank = placement.rank;
  env.size = placement.size;
  env.local_rank = placement.local_rank;
  env.local_size = placement.local_size;
  env.cross_rank = placement.cross_rank;
  env.cross_size = placement.cross_size;
  env.rendezvous_addr = placement.rendezvous_addr;
  env.rendezvous_port = placement.rendezvous_port;
  env.secret = placement.secret;
  return env;
}

}  // namespace hvdrun::runtime
