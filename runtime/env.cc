// Parsing of the HVDRUN_* environment contract (see env.h).
#include "runtime/env.h"

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
    std::string msg =
        "hvdrun: this process was not started by hvdrun (or its environment was "
        "changed):";
    if (!missing_.empty()) {
      msg += " missing";
      for (std::size_t i = 0; i < missing_.size(); ++i) msg += (i ? ", " : " ") + missing_[i];
      msg += ";";
    }
    for (const auto& g : garbled_) msg += " invalid " + g + ";";
    msg += " run it as `hvdrun -np N ... <program>`, which sets these for every rank";
    throw Error(msg);
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
  std::vector<std::string> missing_;
  std::vector<std::string> garbled_;
};

}  // namespace

Environment read_environment(const std::function<const char*(const char*)>& getenv) {
  Parser p(getenv);
  Environment e;
  auto rank = p.number<int>(env_names::kRank, true, 0, env_names::kMaxRanks - 1);
  auto size = p.number<int>(env_names::kSize, true, 1, env_names::kMaxRanks);
  auto lrank = p.number<int>(env_names::kLocalRank, true, 0, env_names::kMaxRanks - 1);
  auto lsize = p.number<int>(env_names::kLocalSize, true, 1, env_names::kMaxRanks);
  auto crank = p.number<int>(env_names::kCrossRank, true, 0, env_names::kMaxRanks - 1);
  auto csize = p.number<int>(env_names::kCrossSize, true, 1, env_names::kMaxRanks);
  auto host = p.text(env_names::kHostname, true);
  auto addr = p.text(env_names::kRendezvousAddr, true);
  auto port = p.number<std::uint16_t>(env_names::kRendezvousPort, true, 1, 65535);
  auto secret = p.text(env_names::kSecret, true);
  auto start = p.number<int>(env_names::kStartTimeout, false, 1, env_names::kMaxStartTimeoutS);
  auto op = p.number<int>(env_names::kOpTimeout, false, 1, env_names::kMaxOpTimeoutS);
  auto gen = p.number<int>(env_names::kGeneration, false, 0, env_names::kMaxGeneration);
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
  if (start) e.start_timeout = std::chrono::seconds(*start);
  if (op) e.op_timeout = std::chrono::seconds(*op);
  if (gen) e.generation = *gen;
  if (nccl) e.nccl_mode = *nccl;
  if (host_path) e.host_path = *host_path;
  if (checkin) e.checkin = *checkin;
  if (stall_check) e.stall_check = std::chrono::seconds(*stall_check);
  if (stall_shutdown) e.stall_shutdown = std::chrono::seconds(*stall_shutdown);
  e.stall_disabled = stall_disable && !stall_disable->empty() && *stall_disable != "0" &&
                     *stall_disable != "false";
  return e;
}

}  // namespace hvdrun::runtime
