// The public C++ API (hvdrun/hvdrun.h): one process-wide World and the Engine that runs
// every collective once the ranks agree on it (runtime/negotiation.h), blocking or
// asynchronous. init() after shutdown() joins again under a fresh key prefix.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/control_protocol.h"
#include "common/fd.h"
#include "common/log.h"
#include "hvdrun/hvdrun.h"
#include "hvdrun/hvdrun_c.h"
#include "runtime/control_link.h"
#include "runtime/device_watchdog.h"
#include "runtime/engine.h"
#include "runtime/generation_end.h"
#include "runtime/process_set.h"
#include "runtime/timeline.h"
#include "runtime/world.h"

namespace hvdrun {

Error::~Error() = default;

namespace {

// The joined job: the World and the engine that runs its collectives. Collectives hold a
// reference for their duration, so shutdown() on one thread cannot pull the World from
// under a collective on another. The engine is declared last so it is destroyed (and has
// run everything queued) before the World.
struct Joined {
  std::unique_ptr<runtime::World> world;
  std::unique_ptr<runtime::Engine> engine;
  // Process sets by id (0, every rank, is the world and engine above). A collective holds
  // its set for its duration, so remove_process_set() cannot pull it away.
  std::mutex sets_mu;
  std::map<int, std::shared_ptr<runtime::ProcessSet>> sets;
  int next_set = 1;  // the same on every rank: sets are added in the same order everywhere
};

std::mutex g_mu;  // guards g_joined (the pointer), never held during a collective
// Deliberately never destroyed at exit: leaving the job needs the network and logging,
// which static destruction may already have torn down. shutdown() releases it.
std::shared_ptr<Joined>& g_joined = *new std::shared_ptr<Joined>;

// Leaving: every process set's engine stops (what is still queued fails) and its
// communicators close; with `farewell`, the set's host leaders first pass a last barrier
// so none closes a connection another still reads.
void close_sets(Joined& j, bool farewell) {
  std::map<int, std::shared_ptr<runtime::ProcessSet>> sets;
  {
    std::lock_guard lock(j.sets_mu);
    sets.swap(j.sets);
  }
  for (auto& [id, set] : sets) {
    if (!set->engine) continue;
    set->engine->stop();
    try {
      if (farewell) set->host->farewell(std::chrono::seconds(10));
    } catch (const std::exception& e) {
      hvdrun::log().warn("hvdrun: leaving process set {}: {}", id, e.what());
    }
  }
}

// A job whose engine shut down because another rank did (one rank's shutdown shuts every
// rank down, as in Horovod) is retired here as shutdown() would: this process is then
// not initialised, and init() joins afresh. g_mu held.
void retire_if_closed() {
  if (!g_joined || !g_joined->engine->closed()) return;
  auto j = std::move(g_joined);
  close_sets(*j, true);
  j->engine->stop();
  j->world->leave(true);
}

std::shared_ptr<Joined> joined(const char* fn) {
  std::lock_guard lock(g_mu);
  retire_if_closed();
  if (!g_joined)
    throw Error(std::string("hvdrun::") + fn +
                "() called before hvdrun::init() (or after hvdrun::shutdown())");
  return g_joined;
}

void check_dtype(DataType t) {
  if (static_cast<unsigned>(t) > static_cast<unsigned>(DataType::kUInt8))
    throw Error("hvdrun: unknown data type " + std::to_string(static_cast<int>(t)));
}
void check_op(ReduceOp op) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::kProduct))
    throw Error("hvdrun: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

// Runs a collective's data movement, attaching what it was and where to a failure once.
template <typename Fn>
void collective(runtime::World& w, const runtime::Request& q, Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw w.peer_failure(runtime::label(q) + " " + runtime::tensor_text(q), e);
  }
}

}  // namespace

std::size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  throw Error("hvdrun: unknown data type " + std::to_string(static_cast<int>(dtype)));
}

namespace {

// init() calls so far in this process in generation g_incarnation_generation (guarded by
// g_mu): a process joining its generation again checks in under a prefix of its own; one
// moved to a next generation (in-process elastic recovery) checks in as its first time
// there, as the ranks started for that generation do.
int g_incarnation = 0;
int g_incarnation_generation = -1;

// The control channel from this rank's agent (HVDRUN_CONTROL_FD; in-process elastic
// recovery, docs/elastic.md), opened by the first init() that finds the variable; never
// closed, as its reader must hear the agent between a shutdown() and the next init().
// Guarded by g_mu, as is the placement this process last moved to.
runtime::ControlLink* g_control = nullptr;
std::optional<control::Placement> g_placement;
// The newest generation this process left after a failed collective (guarded by g_mu):
// under a control channel it is over for this process, which waits for its next place.
int g_failed_generation = -1;

// The environment of the generation this init() joins: the process's own, unless the
// agent has moved the rank (the generation ended, or hosts were added): then the
// placement the agent sent, waited for up to the start timeout. g_mu held.
runtime::Environment place(runtime::Environment env) {
  if (env.control_fd >= 0 && g_control == nullptr)
    g_control = new runtime::ControlLink(UniqueFd(env.control_fd));
  if (g_control == nullptr) return env;
  if (g_placement) env = runtime::placed(std::move(env), *g_placement);
  // Until the generation to join is one the agent has not ended already (a survivor may
  // have died while the job re-formed).
  for (;;) {
    const int current = env.generation;
    const bool over = (runtime::generation_end().ended() &&
                       runtime::generation_end().ended_generation() >= current) ||
                      g_failed_generation >= current;
    if (!over && !g_control->placement_pending(current)) return env;
    g_control->left(current);
    auto next =
        g_control->wait_placement(current, std::chrono::steady_clock::now() + env.start_timeout);
    if (!next)
      throw Error("hvdrun::init(): generation " + std::to_string(current) +
                  " ended and this host's agent gave rank " + std::to_string(env.rank) +
                  " no place in the next one within the start timeout (" +
                  std::to_string(env.start_timeout.count() / 1000) +
                  " s, HVDRUN_START_TIMEOUT): the job has ended or left this rank out; exit "
                  "the process");
    g_placement = *next;
    env = runtime::placed(std::move(env), *next);
  }
}

// The timeline (HOROVOD_TIMELINE, start_timeline()): one per process, written on rank 0
// as Horovod's; never destroyed (its writer is stopped by shutdown()).
runtime::Timeline& timeline() {
  static auto* t = new runtime::Timeline();
  return *t;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0;
}

runtime::StallPolicy stall_policy(const runtime::Environment& env) {
  runtime::StallPolicy p;
  p.check = env.stall_check;
  p.shutdown = env.stall_shutdown;
  p.disabled = env.stall_disabled;
  return p;
}

runtime::Engine::Hooks engine_hooks(runtime::World* w) {
  runtime::Engine::Hooks h;
  h.exchange = [w](const void* mine, void* all, std::size_t bytes, const runtime::Request* head) {
    w->exchange(mine, all, bytes, head);
  };
  h.stand_in = [w](const runtime::Ready& rd) { w->stand_in(rd); };
  h.stall = [](const std::string& text, bool ends_job) {
    hvdrun::log().warn("{}", text);
    if (!ends_job) return;
    hvdrun::log().flush();
    std::fflush(nullptr);
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
    // The engine thread may be blocked in a round with no way out: leave at once and
    // let the launcher stop the job (the device watchdog's exit code).
    std::_Exit(runtime::DeviceWatchdog::kExitCode);
  };
  h.arrived = [w](long long round) { w->stall_arrived(round); };
  h.timeline = &timeline();
  h.missing_from_round = [w](long long round) { return w->stall_missing(round); };
  return h;
}

}  // namespace

void init() {
  std::lock_guard lock(g_mu);
  retire_if_closed();
  if (g_joined) return;
  auto env = place(runtime::read_environment([](const char* n) { return std::getenv(n); }));
  if (env.generation != g_incarnation_generation) {
    g_incarnation_generation = env.generation;
    g_incarnation = 0;
  }
  env.incarnation = g_incarnation;
  // A new generation starts unended (runtime/generation_end.h), unless the agent has
  // already ended the one being joined (or the agent is gone): its first collective then
  // fails, and the next init() takes the placement after it.
  if (runtime::generation_end().ended_generation() < env.generation)
    runtime::generation_end().rearm();
  auto j = std::make_shared<Joined>();
  j->world = std::make_unique<runtime::World>(std::move(env));
  ++g_incarnation;
  j->engine = std::make_unique<runtime::Engine>(engine_hooks(j->world.get()), j->world->env().size,
                                                stall_policy(j->world->env()));
  // HOROVOD_TIMELINE=file starts the timeline at init (DYNAMIC: later, start_timeline()).
  const char* path = std::getenv("HOROVOD_TIMELINE");
  if (path != nullptr && *path != '\0' && std::strcmp(path, "DYNAMIC") != 0 &&
      j->world->env().rank == 0 && !timeline().enabled())
    timeline().start(path, env_flag("HOROVOD_TIMELINE_MARK_CYCLES"));
  g_joined = std::move(j);
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  retire_if_closed();
  return g_joined != nullptr;
}

void shutdown() {
  std::shared_ptr<Joined> j;
  {
    std::lock_guard lock(g_mu);
    j = std::move(g_joined);
  }
  if (!j) return;
  // Shutdown is agreed like a collective: what the ranks still agree on runs, what can
  // then never complete fails, and everyone leaves together. After a failed collective
  // the job is over: leave without waiting for peers that are gone.
  const bool healthy = j->engine->shutdown();
  if (!healthy) {
    std::lock_guard lock(g_mu);
    g_failed_generation = std::max(g_failed_generation, j->world->env().generation);
  }
  timeline().stop();
  close_sets(*j, healthy);
  j->engine->stop();
  j->world->leave(healthy);
}

void leave() noexcept {
  std::shared_ptr<Joined> j;
  {
    std::lock_guard lock(g_mu);
    j = std::move(g_joined);
  }
  if (!j) return;
  try {
    close_sets(*j, false);
    j->engine->stop();
    j->world->leave(j->engine->failure().empty());
  } catch (const std::exception& e) {
    hvdrun::log().warn("hvdrun: leaving: {}", e.what());
  }
}

namespace {
const runtime::Environment& env_of(const char* fn) { return joined(fn)->world->env(); }
}  // namespace

int rank() { return env_of("rank").rank; }
int size() { return env_of("size").size; }
int local_rank() { return env_of("local_rank").local_rank; }
int local_size() { return env_of("local_size").local_size; }
int cross_rank() { return env_of("cross_rank").cross_rank; }
int cross_size() { return env_of("cross_size").cross_size; }
int generation() { return env_of("generation").generation; }

int runtime::declare_elastic() {
  const int current = env_of("hvdrun_elastic_declare").generation;
  std::lock_guard lock(g_mu);
  if (g_control == nullptr) return 0;
  g_control->declare_elastic(current);
  return 1;
}

int runtime::pending_host_update() {
  std::optional<control::Placement> next;
  {
    std::lock_guard lock(g_mu);
    if (g_control == nullptr) return 0;
    const int current =
        g_joined ? g_joined->world->env().generation : (g_placement ? g_placement->generation : -1);
    next = g_control->pending(current);
  }
  if (!next) return 0;
  return (next->hosts_added ? HVDRUN_HOSTS_ADDED : 0) |
         (next->hosts_removed ? HVDRUN_HOSTS_REMOVED : 0);
}

namespace {

const char* kind_text(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kAlltoall:
      return "alltoall";
    case CollectiveKind::kReducescatter:
      return "reducescatter";
  }
  return "collective";
}

runtime::NcclComm& nccl(runtime::World& w, const char* fn) {
  if (!w.nccl())
    throw Error(std::string("hvdrun::") + fn +
                ": device buffers need NCCL, which is unavailable: " + w.nccl_status());
  return *w.nccl();
}

// The ranks a collective runs among: the whole job, or a process set's members.
struct Group {
  runtime::World* world = nullptr;
  runtime::ProcessSet* set = nullptr;  // null: every rank
  int rank = 0;
  int size = 1;
  runtime::HostComm& host() const { return set != nullptr ? *set->host : world->host(); }
  // The GPU communicator; a set builds its own on first use (every member reaches this
  // point of the agreed order together).
  runtime::NcclComm& nccl() const {
    if (set == nullptr) return *world->nccl();
    if (!set->nccl)
      set->nccl = world->subset_nccl(set->prefix + "/nccl/id", set->rank,
                                     static_cast<int>(set->ranks.size()));
    return *set->nccl;
  }
};

// A collective checked at submission (bad arguments fail there, like NCCL being
// unavailable for device buffers) and turned into its request and body.
struct Prepared {
  std::shared_ptr<Joined> j;
  std::shared_ptr<runtime::ProcessSet> set;  // held while the collective is in flight
  runtime::Engine* engine = nullptr;
  Group group;
  runtime::Request request;
  const void* small_input = nullptr;  // carried in the round when small (Window::payload)
};

// A process set this rank belongs to, held for a collective's duration.
std::shared_ptr<runtime::ProcessSet> member_set(Joined& j, int id, const char* fn) {
  std::lock_guard lock(j.sets_mu);
  auto it = j.sets.find(id);
  if (it == j.sets.end())
    throw Error(std::string("hvdrun::") + fn + ": process set " + std::to_string(id) +
                " does not exist (never added, or removed); add it with add_process_set() "
                "on every rank first");
  if (it->second->rank < 0)
    throw Error(std::string("hvdrun::") + fn + ": this rank (" +
                std::to_string(j.world->env().rank) + ") is not in process set " +
                std::to_string(id) + " (ranks " + runtime::ranks_text(it->second->ranks) +
                "); only its members may call its collectives");
  return it->second;
}

// Handles of a process set's collectives carry its id above the engine's own number, so
// wait() and poll() find the engine that issued them.
constexpr int kSetShift = 40;
Handle to_public(int set, Handle h) { return (static_cast<Handle>(set) << kSetShift) | h; }

struct EngineHandle {
  runtime::Engine* engine;
  std::shared_ptr<void> holds;  // the job or the set that owns the engine
  Handle handle;
};
EngineHandle engine_of(Handle h, const char* fn) {
  auto j = joined(fn);
  const int id = h > 0 ? static_cast<int>(h >> kSetShift) : 0;
  if (id == 0) return {j->engine.get(), j, h};
  auto set = member_set(*j, id, fn);
  return {set->engine.get(), set, h & ((Handle{1} << kSetShift) - 1)};
}

// An alltoall's splits: one entry per rank, none negative, adding up to the tensor;
// without splits the tensor must divide equally.
void check_splits(const Collective& c, int n) {
  // (A rank that receives nothing may pass no output; recv_count is checked everywhere.)
  if (c.count > 0 && c.send == nullptr) throw Error("hvdrun::alltoall: null buffer");
  if (c.splits == nullptr) {
    if (c.count % static_cast<std::size_t>(n) != 0)
      throw Error("hvdrun::alltoall: " + std::to_string(c.count) +
                  " elements cannot be split equally among " + std::to_string(n) +
                  " ranks; pass splits (elements for each rank)");
    return;
  }
  std::int64_t sum = 0;
  for (int r = 0; r < n; ++r) {
    if (c.splits[r] < 0)
      throw Error("hvdrun::alltoall: splits[" + std::to_string(r) + "] is " +
                  std::to_string(c.splits[r]) + "; splits cannot be negative");
    sum += c.splits[r];
  }
  if (static_cast<std::size_t>(sum) != c.count)
    throw Error("hvdrun::alltoall: the splits add up to " + std::to_string(sum) +
                " elements but the tensor has " + std::to_string(c.count) +
                "; give one entry per rank (" + std::to_string(n) +
                ") adding up to the tensor's size");
}

// The slices of a reduce-scatter, in elements per rank: the first dimension split as
// Horovod does (ranks below rows % n get one row more). From the round's agreed request,
// which holds its own copy of the shape (the caller's may be gone by the time data moves).
std::vector<std::size_t> slices(const runtime::Request& r, int n) {
  const auto rows = static_cast<std::size_t>(r.shape[0]);
  const std::size_t row = rows == 0 ? 0 : r.count / rows;
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::size_t> out(N);
  for (std::size_t k = 0; k < N; ++k) out[k] = (rows / N + (k < rows % N ? 1 : 0)) * row;
  return out;
}

// An alltoall: first every rank's splits and receive capacity travel to every rank (so
// all check every capacity alike and a too-small buffer fails the collective everywhere,
// before data moves), then the data.
void alltoall(const Group& g, const Collective& a) {
  const int n = g.size, me = g.rank;
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::int64_t> mine(N + 1), all(N * (N + 1));
  for (std::size_t j = 0; j < N; ++j)
    mine[j] = a.splits != nullptr ? a.splits[j] : static_cast<std::int64_t>(a.count / N);
  mine[N] = static_cast<std::int64_t>(a.recv_count);
  {
    const runtime::TimelineActivity splits("ALLTOALL_SPLITS");
    g.host().allgather(mine.data(), all.data(), mine.size() * sizeof(std::int64_t));
  }
  auto at = [&](std::size_t i, std::size_t j) { return all[i * (N + 1) + j]; };
  for (std::size_t j = 0; j < N; ++j) {
    std::int64_t in = 0;
    for (std::size_t i = 0; i < N; ++i) in += at(i, j);
    if (in > at(j, N))
      throw runtime::Refused("hvdrun::alltoall: rank " + std::to_string(j) + " is sent " +
                             std::to_string(in) + " elements but its output holds " +
                             std::to_string(at(j, N)) +
                             " (recv_count); size the output from the splits every rank sends it");
  }
  const std::size_t es = dtype_size(a.dtype);
  std::vector<std::size_t> out(N), in(N), matrix(N * N);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = 0; j < N; ++j) matrix[i * N + j] = static_cast<std::size_t>(at(i, j)) * es;
  for (std::size_t k = 0; k < N; ++k) {
    out[k] = static_cast<std::size_t>(at(static_cast<std::size_t>(me), k));
    in[k] = static_cast<std::size_t>(at(k, static_cast<std::size_t>(me)));
    if (a.received_splits != nullptr) a.received_splits[k] = static_cast<std::int64_t>(in[k]);
  }
  if (a.device) {
    const runtime::TimelineActivity nccl("NCCL_ALLTOALL");
    g.nccl().alltoallv(a.send, out, a.recv, in, a.dtype, a.cuda_stream);
  } else {
    g.host().alltoallv(a.send, a.recv, matrix);
  }
}

Prepared prepare(const Collective& c) {
  const char* fn = kind_text(c.kind);
  auto j = joined(fn);
  check_dtype(c.dtype);
  if (static_cast<unsigned>(c.kind) > static_cast<unsigned>(CollectiveKind::kReducescatter))
    throw Error("hvdrun: unknown collective kind " + std::to_string(static_cast<int>(c.kind)));
  auto* w = j->world.get();
  Prepared p;
  p.group.world = w;
  p.engine = j->engine.get();
  p.group.rank = w->env().rank;
  p.group.size = w->env().size;
  if (c.process_set != 0) {
    p.set = member_set(*j, c.process_set, fn);
    p.engine = p.set->engine.get();
    p.group.set = p.set.get();
    p.group.rank = p.set->rank;
    p.group.size = static_cast<int>(p.set->ranks.size());
  }
  const int n = p.group.size;
  runtime::Kind kind = runtime::Kind::kAllreduce;
  if (c.kind == CollectiveKind::kAllreduce) {
    check_op(c.op);
    if (c.count > 0 && (c.send == nullptr || c.recv == nullptr))
      throw Error("hvdrun::allreduce: null buffer");
  } else if (c.kind == CollectiveKind::kBroadcast) {
    kind = runtime::Kind::kBroadcast;
    if (c.root < 0 || c.root >= w->env().size)
      throw Error("hvdrun::broadcast: root " + std::to_string(c.root) + " is not a rank (size " +
                  std::to_string(w->env().size) + ")");
    if (p.set && p.set->ranks.end() == std::find(p.set->ranks.begin(), p.set->ranks.end(), c.root))
      throw Error("hvdrun::broadcast: root " + std::to_string(c.root) + " is not in process set " +
                  std::to_string(p.set->id) + " (ranks " + runtime::ranks_text(p.set->ranks) + ")");
    if (c.count > 0 && c.recv == nullptr) throw Error("hvdrun::broadcast: null buffer");
  } else if (c.kind == CollectiveKind::kAllgather) {
    kind = runtime::Kind::kAllgather;
    if (c.count > 0 && (c.send == nullptr || c.recv == nullptr))
      throw Error("hvdrun::allgather: null buffer");
  } else if (c.kind == CollectiveKind::kAlltoall) {
    kind = runtime::Kind::kAlltoall;
    check_splits(c, n);
  } else {
    kind = runtime::Kind::kReducescatter;
    check_op(c.op);
    if (c.op != ReduceOp::kSum && c.op != ReduceOp::kAverage)
      throw Error("hvdrun::reducescatter: only Sum and Average are supported (as in Horovod)");
    if (c.ndim > 0 && c.shape == nullptr) throw Error("hvdrun::reducescatter: shape has no values");
    // (A rank whose slice is empty may pass no output.)
    if (c.count > 0 && c.send == nullptr) throw Error("hvdrun::reducescatter: null buffer");
  }
  if (c.ndim < 0 || (c.ndim > 0 && c.shape == nullptr))
    throw Error(std::string("hvdrun::") + fn + ": shape has " + std::to_string(c.ndim) +
                " dimensions but no values");
  auto q = runtime::make_request(kind, c.count, c.dtype, c.name, c.shape, c.ndim, c.type_name);
  q.device = c.device ? 1 : 0;
  if (kind == runtime::Kind::kAllreduce || kind == runtime::Kind::kReducescatter) {
    q.op = static_cast<std::uint8_t>(c.op);
    q.prescale = c.prescale;
    q.postscale = c.postscale;
  }
  // The root is a rank of the job (as in Horovod); inside a set, its index there.
  if (kind == runtime::Kind::kBroadcast)
    q.root = p.set ? static_cast<int>(std::find(p.set->ranks.begin(), p.set->ranks.end(), c.root) -
                                      p.set->ranks.begin())
                   : c.root;

  if (c.device) nccl(*w, fn);  // fails here, at submission, when NCCL is unavailable
  const bool small = !c.device && c.kind == CollectiveKind::kAllreduce &&
                     c.count * dtype_size(c.dtype) <= runtime::kInlineBytes;
  p.j = std::move(j);
  p.request = q;
  p.small_input = small ? c.send : nullptr;
  return p;
}

// A large host output that was just allocated (a framework's new output tensor) has no
// pages yet: every 4 KiB page then costs a fault as the result is written, which on a
// virtual machine made a new 64 MiB output cost 4x a warm one. Asking for huge pages on
// the 2 MiB-aligned interior makes that 32 faults. Anonymous private memory only (the
// kernel refuses anything else, which is then left as it is); already-present pages are
// unaffected, so a warm buffer pays one system call.
void prefer_huge_pages(void* buf, std::size_t bytes) {
  constexpr std::uintptr_t kHuge = std::uintptr_t{1} << 21;
  if (bytes < 4 * kHuge) return;
  const auto p = reinterpret_cast<std::uintptr_t>(buf);
  const std::uintptr_t begin = (p + kHuge - 1) & ~(kHuge - 1), end = (p + bytes) & ~(kHuge - 1);
  if (end > begin)
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // NOLINT
}

// Moves a ready collective's data among `g`: `a`'s buffers, the round's agreed view `rd`.
void move_data(const Group& g, const Collective& a, const runtime::Ready& rd) {
  collective(*g.world, rd.request, [&] {
    const auto counts = a.kind == CollectiveKind::kReducescatter ? slices(rd.request, g.size)
                                                                 : std::vector<std::size_t>{};
    if (!a.device) {
      const std::size_t es = dtype_size(a.dtype);
      if (a.kind == CollectiveKind::kAlltoall)
        prefer_huge_pages(a.recv, a.recv_count * es);
      else if (a.kind == CollectiveKind::kReducescatter)
        prefer_huge_pages(a.recv, counts[static_cast<std::size_t>(g.rank)] * es);
      else
        prefer_huge_pages(
            a.recv,
            a.count * es *
                (a.kind == CollectiveKind::kAllgather ? static_cast<std::size_t>(g.size) : 1));
    }
    if (a.kind == CollectiveKind::kAlltoall) {
      alltoall(g, a);
    } else if (a.kind == CollectiveKind::kReducescatter) {
      if (a.device) {
        const runtime::TimelineActivity nccl("NCCL_REDUCESCATTER");
        g.nccl().reducescatter(a.send, a.recv, counts, a.dtype, a.op, a.cuda_stream);
      } else {
        g.host().reducescatter(a.send, a.recv, counts, a.dtype, a.op);
      }
    } else if (a.device) {
      auto& dev = g.nccl();
      if (a.kind == CollectiveKind::kAllreduce) {
        const runtime::TimelineActivity nccl("NCCL_ALLREDUCE");
        dev.allreduce(a.send, a.recv, a.count, a.dtype, a.op, a.cuda_stream);
      } else if (a.kind == CollectiveKind::kBroadcast) {
        const runtime::TimelineActivity nccl("NCCL_BCAST");
        dev.broadcast(a.recv, a.count, a.dtype, rd.request.root, a.cuda_stream);
      } else {
        const runtime::TimelineActivity nccl("NCCL_ALLGATHER");
        dev.allgather(a.send, a.recv, a.count, a.dtype, a.cuda_stream);
      }
    } else if (a.kind == CollectiveKind::kAllreduce && rd.inline_data) {
      const runtime::TimelineActivity inline_reduce("INLINE_ALLREDUCE");
      runtime::reduce_inline(rd, a.recv, a.count, a.dtype, a.op);
    } else if (a.kind == CollectiveKind::kAllreduce) {
      g.host().allreduce(a.send, a.recv, a.count, a.dtype, a.op);
    } else if (a.kind == CollectiveKind::kBroadcast) {
      g.host().broadcast(a.recv, a.count * dtype_size(a.dtype), rd.request.root);
    } else {
      g.host().allgather(a.send, a.recv, a.count * dtype_size(a.dtype));
    }
  });
}

// The body of a submitted collective: keeps its own copy of `c` (the pointers stay the
// caller's; names and shape are in the request).
runtime::Engine::Body body_of(const Prepared& p, const Collective& c) {
  return [g = p.group, set = p.set, a = c](const runtime::Ready& rd) { move_data(g, a, rd); };
}

Collective host(CollectiveKind kind, const void* send, void* recv, std::size_t count,
                DataType dtype) {
  Collective c;
  c.kind = kind;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.dtype = dtype;
  return c;
}

Collective on_device(Collective c, void* stream) {
  c.device = true;
  c.cuda_stream = stream;
  return c;
}

Collective reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  auto c = host(CollectiveKind::kAllreduce, send, recv, count, dtype);
  c.op = op;
  return c;
}

Collective bcast(void* buf, std::size_t count, DataType dtype, int root) {
  auto c = host(CollectiveKind::kBroadcast, nullptr, buf, count, dtype);
  c.root = root;
  return c;
}

Collective gather(const void* send, void* recv, std::size_t count, DataType dtype) {
  return host(CollectiveKind::kAllgather, send, recv, count, dtype);
}

}  // namespace

Handle submit(const Collective& c) {
  auto p = prepare(c);
  return to_public(c.process_set,
                   p.engine->submit(p.request, body_of(p, c), nullptr, p.small_input));
}

Handle submit(const Collective& c, void (*then)(void*, long long), void* arg) {
  auto p = prepare(c);
  runtime::Engine::Body next;
  if (then != nullptr) next = [then, arg](const runtime::Ready& rd) { then(arg, rd.request.seq); };
  return to_public(c.process_set,
                   p.engine->submit(p.request, body_of(p, c), std::move(next), p.small_input));
}

void run(const Collective& c) {
  auto p = prepare(c);
  // run() returns once the collective has run, so its body may refer to the caller's `c`
  // (small enough to need no allocation).
  p.engine->run(
      p.request, [&p, &c](const runtime::Ready& rd) { move_data(p.group, c, rd); }, p.small_input);
}

std::int64_t sequence(Handle handle) {
  auto [engine, holds, h] = engine_of(handle, "sequence");
  return engine->seq_of(h);
}

void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  run(reduce(send, recv, count, dtype, op));
}
void broadcast(void* buf, std::size_t count, DataType dtype, int root) {
  run(bcast(buf, count, dtype, root));
}
void allgather(const void* send, void* recv, std::size_t count, DataType dtype) {
  run(gather(send, recv, count, dtype));
}

namespace {
runtime::Request barrier_request() {
  return runtime::make_request(runtime::Kind::kBarrier, 0, DataType::kUInt8, nullptr, nullptr, 0,
                               nullptr);
}
}  // namespace

// A barrier moves nothing: the round that agrees on it has every rank in it.
void barrier() { joined("barrier")->engine->run(barrier_request(), nullptr); }

Handle allreduce_async(const void* send, void* recv, std::size_t count, DataType dtype,
                       ReduceOp op) {
  return submit(reduce(send, recv, count, dtype, op));
}
Handle broadcast_async(void* buf, std::size_t count, DataType dtype, int root) {
  return submit(bcast(buf, count, dtype, root));
}
Handle allgather_async(const void* send, void* recv, std::size_t count, DataType dtype) {
  return submit(gather(send, recv, count, dtype));
}
Handle barrier_async() { return joined("barrier")->engine->submit(barrier_request(), nullptr); }

void allreduce_device(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                      void* stream) {
  run(on_device(reduce(send, recv, count, dtype, op), stream));
}
void broadcast_device(void* buf, std::size_t count, DataType dtype, int root, void* stream) {
  run(on_device(bcast(buf, count, dtype, root), stream));
}
void allgather_device(const void* send, void* recv, std::size_t count, DataType dtype,
                      void* stream) {
  run(on_device(gather(send, recv, count, dtype), stream));
}

Handle allreduce_device_async(const void* send, void* recv, std::size_t count, DataType dtype,
                              ReduceOp op, void* stream) {
  return submit(on_device(reduce(send, recv, count, dtype, op), stream));
}
Handle broadcast_device_async(void* buf, std::size_t count, DataType dtype, int root,
                              void* stream) {
  return submit(on_device(bcast(buf, count, dtype, root), stream));
}
Handle allgather_device_async(const void* send, void* recv, std::size_t count, DataType dtype,
                              void* stream) {
  return submit(on_device(gather(send, recv, count, dtype), stream));
}

bool poll(Handle handle) {
  auto [engine, holds, h] = engine_of(handle, "poll");
  return engine->poll(h);
}
void wait(Handle handle) {
  auto [engine, holds, h] = engine_of(handle, "wait");
  engine->wait(h);
}
std::int64_t pending() {
  auto j = joined("pending");
  std::int64_t n = j->engine->pending();
  std::lock_guard lock(j->sets_mu);
  for (const auto& [id, set] : j->sets)
    if (set->engine) n += set->engine->pending();
  return n;
}

int join() { return joined("join")->engine->join(); }

namespace {

std::uint64_t fnv(const void* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<const unsigned char*>(data)[i];
    h *= 1099511628211ULL;
  }
  return h;
}

// Every rank's value of `mine` (fixed size), gathered over the whole job through its
// engine: process sets are added and removed at the same point of the agreed order on
// every rank.
template <typename T>
std::vector<T> gather_all(const T& mine) {
  std::vector<T> all(static_cast<std::size_t>(size()));
  run(host(CollectiveKind::kAllgather, &mine, all.data(), sizeof(T), DataType::kUInt8));
  return all;
}

runtime::Engine::Hooks set_hooks(runtime::ProcessSet* s) {
  runtime::Engine::Hooks h;
  h.exchange = [s](const void* mine, void* all, std::size_t bytes, const runtime::Request*) {
    s->host->allgather(mine, all, bytes);
  };
  h.stand_in = [](const runtime::Ready&) {};  // join() is the job's: sets see no joined ranks
  h.timeline = &timeline();
  h.stall = [id = s->id](const std::string& text, bool) {
    hvdrun::log().warn("{} (process set {})", text, id);
  };
  return h;
}

}  // namespace

int add_process_set(const std::vector<int>& ranks_in) {
  auto j = joined("add_process_set");
  const auto& env = j->world->env();
  std::vector<int> ranks = ranks_in;
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) throw Error("hvdrun::add_process_set: a process set needs at least one rank");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= env.size)
      throw Error("hvdrun::add_process_set: rank " + std::to_string(ranks[i]) +
                  " is not a rank of this job (size " + std::to_string(env.size) + ")");
    if (i > 0 && ranks[i] == ranks[i - 1])
      throw Error("hvdrun::add_process_set: rank " + std::to_string(ranks[i]) + " is listed twice");
  }
  // Every rank must add the same set; each learns where every rank runs.
  struct Entry {
    std::uint64_t list;
    std::uint64_t host;
  };
  const auto all = gather_all(Entry{fnv(ranks.data(), ranks.size() * sizeof(int)),
                                    fnv(env.hostname.data(), env.hostname.size())});
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].list != all[0].list)
      throw Error("hvdrun::add_process_set: rank " + std::to_string(r) +
                  " added a different set than rank 0 (this rank: ranks " +
                  runtime::ranks_text(ranks) +
                  "); every rank must add the same sets in the "
                  "same order");
  auto set = std::make_shared<runtime::ProcessSet>();
  set->ranks = ranks;
  {
    std::lock_guard lock(j->sets_mu);
    for (const auto& [id, other] : j->sets)
      if (other->ranks == ranks) throw DuplicateProcessSet(id, ranks);
    set->id = j->next_set++;
  }
  const auto at = std::find(ranks.begin(), ranks.end(), env.rank);
  if (at != ranks.end()) {
    set->rank = static_cast<int>(at - ranks.begin());
    std::vector<std::uint64_t> hosts;
    for (const auto& e : all) hosts.push_back(e.host);
    set->env = runtime::set_environment(env, ranks, hosts);
    set->prefix = j->world->prefix() + "/ps/" + std::to_string(set->id);
    set->host = j->world->subset_host(set->env, set->prefix);
    set->engine =
        std::make_unique<runtime::Engine>(set_hooks(set.get()), set->env.size, stall_policy(env));
  }
  std::lock_guard lock(j->sets_mu);
  j->sets.emplace(set->id, set);
  return set->id;
}

bool remove_process_set(int id) {
  auto j = joined("remove_process_set");
  const auto all = gather_all(static_cast<std::int64_t>(id));
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw Error("hvdrun::remove_process_set: rank " + std::to_string(r) + " removed set " +
                  std::to_string(all[r]) + ", rank 0 set " + std::to_string(all[0]) +
                  "; every rank must remove the same sets in the same order");
  std::shared_ptr<runtime::ProcessSet> set;
  {
    std::lock_guard lock(j->sets_mu);
    auto it = j->sets.find(id);
    if (it == j->sets.end()) return false;
    set = it->second;
    j->sets.erase(it);
  }
  if (set->engine) {
    // What the members still agree on runs; then the set's communicators close.
    const bool healthy = set->engine->shutdown();
    set->engine->stop();
    if (healthy) set->host->farewell(std::chrono::seconds(10));
  }
  return true;
}

std::vector<int> process_set_ranks(int id) {
  auto j = joined("process_set_ranks");
  if (id == 0) {
    std::vector<int> all(static_cast<std::size_t>(j->world->env().size));
    for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
    return all;
  }
  std::lock_guard lock(j->sets_mu);
  auto it = j->sets.find(id);
  if (it == j->sets.end())
    throw Error("hvdrun::process_set_ranks: process set " + std::to_string(id) +
                " does not exist (never added, or removed)");
  return it->second->ranks;
}

DuplicateProcessSet::DuplicateProcessSet(int existing, const std::vector<int>& ranks)
    : Error("hvdrun::add_process_set: process set " + std::to_string(existing) +
            " already has ranks " + runtime::ranks_text(ranks) + "; use it, or remove it first"),
      existing_(existing) {}
DuplicateProcessSet::~DuplicateProcessSet() = default;

void start_timeline(const std::string& path, bool mark_cycles) {
  auto j = joined("start_timeline");
  if (j->world->env().rank == 0) timeline().start(path, mark_cycles);
}

void stop_timeline() {
  joined("stop_timeline");
  timeline().stop();
}

bool nccl_available() {
  std::lock_guard lock(g_mu);
  return g_joined && g_joined->world->nccl() != nullptr;
}

std::string nccl_status() {
  std::lock_guard lock(g_mu);
  if (!g_joined) return "hvdrun::init() has not been called";
  return g_joined->world->nccl_status();
}

const char* version() { return HVDRUN_VERSION; }

}  // namespace hvdrun
