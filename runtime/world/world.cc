// Start-up of one rank (see world.h): check-in protocol and store-based barrier.
//
// Keys, all under "hvdrun/g<generation>":
//   checkin/<r>   counter; a second check-in of the same rank is an error
//   info/<r>      "host=<name> addr=<ip> size=<n> pid=<pid>", read only on failure
//   gpus          counter of ranks with a visible GPU
//   arrived/<n>   counter of ranks that checked in for a world of size n, and of those
//                 whose sizes do not fit an even layout (Arrivals, world.h)
//   ready         set by the rank whose check-in completes the world: "even" when every
//                 host runs the same number of ranks, else "uneven" (is_homogeneous())
//   checkin/host/<host>   counter; HVDRUN_CHECKIN=host: local rank 0 checks its host in
//   barrier/rank/<r>, barrier/<k>/count, barrier/<k>/done   per barrier k
//   gloo/world/addr/<i>/<j>   address of rank i's end of pair (i, j) (HVDRUN_HOST_PATH=gloo)
//   shm/..., hosts/..., frames/leaders/..., leaders/...   the host paths (host_comm.cc)
//   nccl/world/id             ncclUniqueId (or rank 0's reason for not making one)
//   nccl/world/id/<i>         id i of ncclCommInitRankScalable (one per 128 ranks)
#include "runtime/world/world.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/deadline.h"
#include "common/interfaces.h"
#include "common/log.h"
#include "common/peer_loss.h"
#include "common/seconds_text.h"
#include "rendezvous/server.h"
#include "runtime/core/generation_end.h"

namespace hvdrun::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string format_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < 32; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) s += " and " + std::to_string(ranks.size() - 32) + " more";
  return s;
}

namespace {

// Cheap test for a GPU without loading the CUDA runtime (which costs tens of ms per
// process): the NVIDIA device nodes exist.
bool gpu_device_nodes_present() {
  struct stat st;
  return ::stat("/dev/nvidiactl", &st) == 0 || ::stat("/dev/nvidia0", &st) == 0 ||
         ::stat("/dev/dxg", &st) == 0;
}

}  // namespace

std::string World::who() const {
  return "rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.size) + " on " +
         env_.hostname;
}

std::string mesh_address(const std::string& toward_rendezvous, const char* gloo_ifname) {
  if (gloo_ifname == nullptr || *gloo_ifname == '\0') return toward_rendezvous;
  const int family = toward_rendezvous.find(':') == std::string::npos ? AF_INET : AF_INET6;
  const std::string names = gloo_ifname;
  for (std::size_t at = 0; at <= names.size();) {
    const std::size_t comma = std::min(names.find(',', at), names.size());
    std::string address = interface_address(names.substr(at, comma - at), family);
    if (!address.empty()) return address;
    at = comma + 1;
  }
  hvdrun::log().warn(
      "hvdrun: GLOO_SOCKET_IFNAME (or HOROVOD_GLOO_IFACE) is {}, and no interface of that name "
      "has an address on this host; the host path listens on {}, the address toward the "
      "rendezvous. Name an interface that is up with an address, or unset the variable",
      names, toward_rendezvous);
  return toward_rendezvous;
}

// GLOO_SOCKET_IFNAME, else HOROVOD_GLOO_IFACE.
const char* gloo_ifname() {
  const char* name = std::getenv("GLOO_SOCKET_IFNAME");
  return name != nullptr ? name : std::getenv("HOROVOD_GLOO_IFACE");
}

bool checks_in_through_leader(const Environment& env) {
  const bool wanted =
      env.checkin == "host" || (env.checkin == "auto" && env.size >= kCheckinThroughLeaderFrom);
  return wanted && env.host_path != "gloo" && env.local_size > 1 && env.size > 1;
}

World::World(Environment env) : env_(std::move(env)) {
  if (env_.standalone) serve_own_rendezvous();
  auto start = Clock::now();
  auto deadline = start + checkin_timeout();
  // A process that initialises again checks in afresh, under a prefix of its own.
  rendezvous::Key ns = rendezvous::Key("hvdrun") / ("g" + std::to_string(env_.generation));
  if (env_.incarnation > 0) ns = ns / ("i" + std::to_string(env_.incarnation));
  prefix_ = ns.str();

  if (checks_in_through_leader(env_)) {
    // Only local rank 0 opens a connection now; the others check in through it, over
    // the host's segment, and connect later only if they need the store themselves.
    if (env_.local_rank == 0) store();
    host_ = std::make_unique<HostComm>(store_.get(), prefix_, env_,
                                       store_ ? local_address_ : std::string(), deadline, true);
    check_in_host(deadline);
    host_->join_hosts(deadline);
  } else {
    check_in(deadline);
    store();  // sets local_address_
    host_ = std::make_unique<HostComm>(store_.get(), prefix_, env_, local_address_, deadline);
  }
  build_nccl(deadline);
  hvdrun::log().debug("hvdrun: {} joined in {} ms via {}; host memory: {}", who(),
                      std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(),
                      local_address(), host_->describe());
}

// In an elastic job the launcher decides at the start timeout which ranks of a re-formed
// generation are late and re-forms it without them (docs/elastic.md): a rank waits twice as
// long, so that the launcher's decision reaches it first.
milliseconds World::checkin_timeout() const {
  return env_.control_fd >= 0 && !env_.alone ? 2 * env_.start_timeout : env_.start_timeout;
}

void World::serve_own_rendezvous() {
  env_.secret = rendezvous::generate_secret();
  env_.rendezvous_addr = "127.0.0.1";
  own_rendezvous_ = std::make_unique<rendezvous::Server>(env_.secret, env_.rendezvous_addr);
  own_rendezvous_->start();
  env_.rendezvous_port = own_rendezvous_->port();
  // Once per process: init() after shutdown() joins again without repeating it.
  static std::once_flag said;
  if (env_.alone) return;  // a joining process: hvd.elastic.run joins it to the job
  std::call_once(said, [] {
    hvdrun::log().info(
        "hvdrun: not started by hvdrun (no HVDRUN_RANK, HVDRUN_SIZE, ... in the environment): "
        "running as a single process, rank 0 of 1; run `hvdrun -np N <program>` for N ranks");
  });
}

rendezvous::Client& World::store() {
  if (store_) return *store_;
  store_ = std::make_unique<rendezvous::Client>(
      client_options(env_.start_timeout, std::max(env_.start_timeout, milliseconds(30000)), ""));
  local_address_ = mesh_address(store_->local_address(), gloo_ifname());
  return *store_;
}

World::~World() { leave(); }

void World::leave(bool farewell) {
  if (left_) return;
  left_ = true;
  // The final barrier only matters when Gloo connections exist (a peer may still be
  // reading from one); without any, leaving cannot disturb anybody. Across hosts only
  // the leaders hold connections, and they pass a barrier of their own.
  if (farewell && env_.size > 1 && store_ && host_) {
    try {
      // Every peer took part in this rank's last collective, so the ones still inside it
      // are only reading its last bytes: seconds at most. A peer that never comes (it
      // exited without shutdown) must not hold this rank for HVDRUN_OP_TIMEOUT.
      const auto timeout = std::min(env_.op_timeout, kFarewellTimeout);
      if (host_->world_gloo_pairs() > 0) arrive(timeout);
      host_->farewell(timeout);
    } catch (const std::exception& e) {
      hvdrun::log().warn("hvdrun: {}: leaving without the final barrier: {}", who(), e.what());
    }
  }
  nccl_.reset();
  host_.reset();
}

void World::check_in(Clock::time_point deadline) {
  const auto r = std::to_string(env_.rank);
  store();
  if (store_->add(key("checkin") / r, 1) > 1)
    throw Error("rendezvous: rank " + r +
                " has already checked in: two processes were started "
                "with HVDRUN_RANK=" +
                r + " for the same job (on " + env_.hostname + ")");
  store_->set(key("info") / r, "host=" + env_.hostname + " addr=" + store_->local_address() +
                                   " size=" + std::to_string(env_.size) +
                                   " pid=" + std::to_string(::getpid()));
  if (has_gpu()) store_->add(key("gpus"), 1);
  arrive_in_world(1);
  await_world(deadline);
}

// Horovod's is_homogeneous() needs every host's local size; Horovod gathers them in a round
// at init. Here the check-in's arrival counter carries the verdict instead (Arrivals): the
// add each party makes anyway, its value in the same int64, so no rank makes another call,
// and the rank that completes the world writes the verdict into the ready key every rank
// reads after its wait. Every rank of the world thus reads the one answer, whatever its own
// sizes; an in-process re-form checks in again, so a new generation gets its own.
void World::arrive_in_world(int ranks) {
  const Arrivals n(
      store_->add(key("arrived") / env_.size, Arrivals::of(ranks, fits_even_layout(env_))));
  if (n.ranks() == env_.size) store_->set(key("ready"), n.even() ? "even" : "uneven");
}

bool fits_even_layout(const Environment& env) {
  return static_cast<std::int64_t>(env.local_size) * env.cross_size == env.size;
}

bool World::has_gpu() const {
  if (env_.nccl_mode == "off" || !gpu_device_nodes_present()) return false;
  std::string why;
  return cuda_device_count(&why) > 0;
}

// Waits for the last check-in; on timeout names who is missing, and anyone who
// disagrees about the world size. In an elastic job the wait looks at the generation's end
// mark between short slices: when the launcher re-forms the job around a rank that does
// not come, the generation being joined ends and so does the wait, with the reason
// (init() then takes the next placement).
void World::await_world(Clock::time_point deadline) {
  constexpr milliseconds kSlice{200};
  const bool elastic = env_.control_fd >= 0 && !env_.alone;
  std::vector<std::string> missing;
  for (;;) {
    const milliseconds left = time_left(deadline);
    missing = store_->wait_for({key("ready")}, elastic ? std::min(left, kSlice) : left);
    if (missing.empty() || !elastic || left <= kSlice) break;
    generation_end().check();
  }
  if (missing.empty()) {
    const auto got = store_->multi_get({key("gpus"), key("ready")});
    gpus_ = got[0] ? std::strtol(got[0]->c_str(), nullptr, 10) : 0;
    homogeneous_ = got[1] == "even";
    return;
  }

  auto info = store_->multi_get(key("info").range(env_.size));
  std::vector<int> absent;
  std::string mismatch;
  const std::string my_size = "size=" + std::to_string(env_.size) + " ";
  for (int i = 0; i < env_.size; ++i) {
    const auto& v = info[static_cast<std::size_t>(i)];
    if (!v)
      absent.push_back(i);
    else if (v->find(my_size) == std::string::npos)
      mismatch += "; rank " + std::to_string(i) + " reports " + *v;
  }
  std::string msg = "rendezvous: " + who() + ": ";
  if (!absent.empty())
    msg += "rank" + std::string(absent.size() > 1 ? "s " : " ") + format_ranks(absent) +
           " did not arrive within " + seconds_text(checkin_timeout()) + " s (" +
           std::to_string(env_.size - static_cast<int>(absent.size())) + " of " +
           std::to_string(env_.size) + " checked in at " + store_->server_address() +
           "). Check the missing ranks' output for errors; raise --start-timeout if they are "
           "slow to start";
  else
    msg += "all ranks checked in but the world did not complete within " +
           seconds_text(checkin_timeout()) + " s";
  msg += mismatch;
  throw Error(msg);
}

// The host's check-in through its leader: every local rank puts its GPU flag in the
// segment; local rank 0 checks the whole host in with one batch (its ranks' records,
// their count, their GPUs) on its own connection, waits for the world, and hands the
// result (GPU count, its address) back through the segment. A failure of local rank 0
// (a missing rank elsewhere, say) marks the segment failed, so its host's other ranks
// fail at once with its message.
void World::check_in_host(Clock::time_point deadline) {
  struct Slot {
    std::int32_t gpus = 0;         // in: this rank sees a GPU; out: ranks of the job that do
    std::int32_t homogeneous = 1;  // out: the world's is_homogeneous()
    char address[64] = {};         // out: local rank 0's address towards the rendezvous
  };
  ShmComm& shm = *host_->shm();
  const int L = env_.local_size;
  Slot mine;
  mine.gpus = has_gpu() ? 1 : 0;
  std::vector<Slot> all(static_cast<std::size_t>(L));
  Slot reply;
  shm.gather_then_reply(&mine, all.data(), &reply, sizeof(Slot), deadline, [&] {
    const std::string host = env_.hostname;
    if (store_->add(key("checkin") / "host" / host, 1) > 1)
      throw Error("rendezvous: host " + host +
                  " has already checked in: two processes were started as local rank 0 "
                  "(HVDRUN_LOCAL_RANK=0) of host " +
                  host + " for the same job");
    std::vector<std::pair<std::string, std::string>> records;
    std::int64_t gpus = 0;
    for (int l = 0; l < L; ++l) {
      records.emplace_back(key("info") / shm.global_rank(l),
                           "host=" + host + " addr=" + store_->local_address() +
                               " size=" + std::to_string(env_.size) +
                               " pid=" + std::to_string(shm.pid_of(l)) + " via=local-rank-0");
      gpus += all[static_cast<std::size_t>(l)].gpus;
    }
    store_->multi_set(records);
    if (gpus > 0) store_->add(key("gpus"), gpus);
    arrive_in_world(L);  // with local rank 0's sizes, which stand for the host's
    await_world(deadline);
    reply.gpus = static_cast<std::int32_t>(gpus_);
    reply.homogeneous = homogeneous_ ? 1 : 0;
    std::strncpy(reply.address, local_address_.c_str(), sizeof(reply.address) - 1);
  });
  gpus_ = reply.gpus;
  homogeneous_ = reply.homogeneous != 0;
  if (!store_) local_address_.assign(reply.address, strnlen(reply.address, sizeof reply.address));
}

void World::build_nccl(Clock::time_point deadline) {
  if (env_.nccl_mode == "off") {
    nccl_status_ = "NCCL disabled (HVDRUN_NCCL=off)";
    return;
  }
  const long gpus = gpus_;
  bool require = env_.nccl_mode == "require";
  if (gpus != env_.size && !require) {
    nccl_status_ = gpus == 0 ? "no rank has a visible CUDA device"
                             : "only " + std::to_string(gpus) + " of " + std::to_string(env_.size) +
                                   " ranks have a visible CUDA device";
    if (gpus > 0) hvdrun::log().warn("hvdrun: {}: NCCL not initialised: {}", who(), nccl_status_);
    return;
  }
  // NCCL's own traffic uses the interface that reaches the rendezvous, unless the user
  // chose one.
  if (std::getenv("NCCL_SOCKET_IFNAME") == nullptr) {
    auto ifname = interface_for_address(store().local_address());
    if (!ifname.empty()) ::setenv("NCCL_SOCKET_IFNAME", ("=" + ifname).c_str(), 0);
  }
  try {
    nccl_ = std::make_unique<NcclComm>(store(), key("nccl") / "world" / "id", env_.rank, env_.size,
                                       env_.local_rank, env_.local_size, deadline, env_.op_timeout);
  } catch (const Error& e) {
    if (require) throw;
    nccl_status_ = e.what();
    hvdrun::log().warn("hvdrun: {}: continuing without NCCL: {}", who(), e.what());
  }
}

std::unique_ptr<HostComm> World::subset_host(const Environment& env, const std::string& prefix) {
  const auto deadline = std::chrono::steady_clock::now() + env_.start_timeout;
  return std::make_unique<HostComm>(&store(), prefix, env,
                                    local_address_.empty()
                                        ? mesh_address(store().local_address(), gloo_ifname())
                                        : local_address_,
                                    deadline);
}

std::unique_ptr<NcclComm> World::subset_nccl(const std::string& key, int rank, int size) {
  if (!nccl_)
    throw Error("hvdrun: " + who() +
                ": GPU buffers need NCCL, which is unavailable: " + nccl_status_);
  const auto deadline = std::chrono::steady_clock::now() + env_.start_timeout;
  return std::make_unique<NcclComm>(store(), key, rank, size, env_.local_rank, env_.local_size,
                                    deadline, env_.op_timeout);
}

void World::barrier() {
  if (host_ && host_->has_barrier())
    host_->barrier();
  else
    arrive(env_.op_timeout);
}

void World::exchange(const void* mine, std::size_t used, void* all, std::size_t bytes,
                     const Request* head) {
  if (env_.size == 1) {
    std::memcpy(all, mine, std::min(used, bytes));
    return;
  }
  try {
    host_->allgather_upto(mine, used, all, bytes);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw peer_failure(
        head != nullptr ? label(*head) + " " + tensor_text(*head) : std::string("negotiation"), e);
  }
}

Error World::peer_failure(const std::string& what, const std::exception& cause) const {
  return Error("hvdrun: " + what + " failed on rank " + std::to_string(env_.rank) + " of " +
               std::to_string(env_.size) + " (" + env_.hostname + "): " + cause.what() + ". " +
               std::string(kPeerLossSentence));
}

rendezvous::ClientOptions World::client_options(std::chrono::milliseconds connect,
                                                std::chrono::milliseconds call,
                                                const std::string& role) const {
  rendezvous::ClientOptions o;
  o.host = env_.rendezvous_addr;
  o.port = env_.rendezvous_port;
  o.secret = env_.secret;
  o.connect_timeout = connect;
  o.call_timeout = call;
  o.who = "rank " + std::to_string(env_.rank) + role;
  return o;
}

namespace {

template <typename T>
void fill(void* buf, std::size_t count, T value) {
  std::fill_n(static_cast<T*>(buf), count, value);
}

// Raw bits of the half-precision infinities, for Min and Max stand-ins.
constexpr std::uint16_t kHalfInf = 0x7C00, kHalfNegInf = 0xFC00;
constexpr std::uint16_t kBfloatInf = 0x7F80, kBfloatNegInf = 0xFF80;

// The identity of `op` in `dtype`: what a joined rank contributes.
void fill_identity(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    std::memset(buf, 0, count * dtype_size(dtype));
    return;
  }
  const bool product = op == ReduceOp::kProduct, min = op == ReduceOp::kMin;
  switch (dtype) {
    case DataType::kInt32:
      return fill<std::int32_t>(buf, count, product ? 1 : min ? INT32_MAX : INT32_MIN);
    case DataType::kInt64:
      return fill<std::int64_t>(buf, count, product ? 1 : min ? INT64_MAX : INT64_MIN);
    case DataType::kUInt8:
      return fill<std::uint8_t>(buf, count, product ? 1 : min ? 255 : 0);
    case DataType::kFloat32:
      return fill<float>(buf, count, product ? 1.0F : min ? HUGE_VALF : -HUGE_VALF);
    case DataType::kFloat64:
      return fill<double>(buf, count, product ? 1.0 : min ? HUGE_VAL : -HUGE_VAL);
    case DataType::kFloat16:
      return fill<std::uint16_t>(buf, count, product ? 0x3C00 : min ? kHalfInf : kHalfNegInf);
    case DataType::kBFloat16:
      return fill<std::uint16_t>(buf, count, product ? 0x3F80 : min ? kBfloatInf : kBfloatNegInf);
  }
}

}  // namespace

void World::stand_in(const Ready& ready) {
  const Request& q = ready.request;
  if (q.kind != Kind::kAllreduce || q.count == 0) return;  // a barrier: the round was it
  const auto dtype = static_cast<DataType>(q.dtype);
  const auto op = static_cast<ReduceOp>(q.op);
  std::vector<char> identity(q.count * dtype_size(dtype));
  fill_identity(identity.data(), q.count, dtype, op);
  if (q.device != 0) {
    if (!nccl_)
      throw Error("hvdrun: " + who() + " has joined and must stand in for " + label(q) +
                  " on the GPU, but it has no NCCL communicator: " + nccl_status_);
    nccl_->allreduce_from_host(identity.data(), q.count, dtype, op);
    return;
  }
  host_->allreduce(identity.data(), identity.data(), q.count, dtype, op);
}

void World::stall_arrived(long long round) noexcept {
  try {
    std::lock_guard lock(stall_mu_);
    if (!stall_store_) {
      stall_store_ = std::make_unique<rendezvous::Client>(
          client_options(std::chrono::seconds(5), std::chrono::seconds(5), " (stall report)"));
    }
    stall_store_->set(key("stall") / env_.rank, std::to_string(round));
  } catch (const std::exception& e) {
    hvdrun::log().debug("hvdrun: {}: stall report: {}", who(), e.what());
  }
}

std::vector<int> World::stall_missing(long long round) noexcept {
  std::vector<int> missing;
  try {
    std::lock_guard lock(stall_mu_);
    if (!stall_store_) return missing;
    auto seen = stall_store_->multi_get(key("stall").range(env_.size));
    for (int r = 0; r < env_.size; ++r) {
      const auto& v = seen[static_cast<std::size_t>(r)];
      if (!v || std::strtoll(v->c_str(), nullptr, 10) != round) missing.push_back(r);
    }
  } catch (const std::exception& e) {
    hvdrun::log().debug("hvdrun: {}: stall report: {}", who(), e.what());
    missing.clear();
  }
  return missing;
}

int World::arrive(std::chrono::milliseconds timeout) {
  if (env_.size == 1) return env_.rank;
  const long long k = ++barrier_seq_;
  const rendezvous::Key base = key("barrier");
  const std::string ks = std::to_string(k);
  const rendezvous::Key round = base / ks;
  store();
  store_->set(base / "rank" / env_.rank, ks);
  if (store_->add(round / "count", 1) == env_.size) {
    store_->set(round / "done", std::to_string(env_.rank));
    // Everyone has left barrier k-1 (they all arrived here), so its keys can go.
    if (k > 1) {
      const rendezvous::Key previous = base / std::to_string(k - 1);
      store_->erase(previous / "count");
      store_->erase(previous / "done");
    }
  }
  auto missing = store_->wait_for({round / "done"}, timeout);
  if (missing.empty()) {
    // Barrier k's keys go only when barrier k+1 completes, which needs this rank.
    auto last = store_->get(round / "done");
    return last ? static_cast<int>(std::strtol(last->c_str(), nullptr, 10)) : -1;
  }
  auto seen = store_->multi_get((base / "rank").range(env_.size));
  std::vector<int> late;
  for (int i = 0; i < env_.size; ++i) {
    const auto& v = seen[static_cast<std::size_t>(i)];
    if (!v || std::strtoll(v->c_str(), nullptr, 10) < k) late.push_back(i);
  }
  throw Error("barrier " + ks + ": " + who() + ": rank(s) " + format_ranks(late) +
              " did not arrive within " + seconds_text(timeout) + " s" +
              (timeout == env_.op_timeout ? " (HVDRUN_OP_TIMEOUT)" : ""));
}

}  // namespace hvdrun::runtime
