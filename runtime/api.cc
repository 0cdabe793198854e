// The public C++ API (hvdrun/hvdrun.h): one process-wide World and the Engine that runs
// every collective once the ranks agree on it (runtime/negotiation.h), blocking or
// asynchronous. init() after shutdown() joins again under a fresh key prefix.
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "hvdrun/hvdrun.h"
#include "runtime/device_watchdog.h"
#include "runtime/engine.h"
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
};

std::mutex g_mu;  // guards g_joined (the pointer), never held during a collective
// Deliberately never destroyed at exit: leaving the job needs the network and logging,
// which static destruction may already have torn down. shutdown() releases it.
std::shared_ptr<Joined>& g_joined = *new std::shared_ptr<Joined>;

// A job whose engine shut down because another rank did (one rank's shutdown shuts every
// rank down, as in Horovod) is retired here as shutdown() would: this process is then
// not initialised, and init() joins afresh. g_mu held.
void retire_if_closed() {
  if (!g_joined || !g_joined->engine->closed()) return;
  auto j = std::move(g_joined);
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

int g_incarnation = 0;  // init() calls so far in this process (guarded by g_mu)

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
  h.missing_from_round = [w](long long round) { return w->stall_missing(round); };
  return h;
}

}  // namespace

void init() {
  std::lock_guard lock(g_mu);
  retire_if_closed();
  if (g_joined) return;
  auto env = runtime::read_environment([](const char* n) { return std::getenv(n); });
  env.incarnation = g_incarnation;
  auto j = std::make_shared<Joined>();
  j->world = std::make_unique<runtime::World>(std::move(env));
  ++g_incarnation;
  j->engine = std::make_unique<runtime::Engine>(engine_hooks(j->world.get()), j->world->env().size,
                                                stall_policy(j->world->env()));
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

// A collective checked at submission (bad arguments fail there, like NCCL being
// unavailable for device buffers) and turned into its request and body.
struct Prepared {
  std::shared_ptr<Joined> j;
  runtime::Request request;
  const void* small_input = nullptr;  // carried in the round when small (Window::payload)
};

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

// This rank's slices of a reduce-scatter, in elements per rank: the first dimension
// split as Horovod does (ranks below rows % n get one row more).
std::vector<std::size_t> slices(const Collective& a, int n) {
  const auto rows =
      static_cast<std::size_t>(a.ndim > 0 ? a.shape[0] : static_cast<std::int64_t>(a.count));
  const std::size_t row = rows == 0 ? 0 : a.count / rows;
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::size_t> out(N);
  for (std::size_t r = 0; r < N; ++r) out[r] = (rows / N + (r < rows % N ? 1 : 0)) * row;
  return out;
}

// An alltoall: first every rank's splits and receive capacity travel to every rank (so
// all check every capacity alike and a too-small buffer fails the collective everywhere,
// before data moves), then the data.
void alltoall(runtime::World& w, const Collective& a) {
  const int n = w.env().size, me = w.env().rank;
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::int64_t> mine(N + 1), all(N * (N + 1));
  for (std::size_t j = 0; j < N; ++j)
    mine[j] = a.splits != nullptr ? a.splits[j] : static_cast<std::int64_t>(a.count / N);
  mine[N] = static_cast<std::int64_t>(a.recv_count);
  w.host().allgather(mine.data(), all.data(), mine.size() * sizeof(std::int64_t));
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
  if (a.device)
    w.nccl()->alltoallv(a.send, out, a.recv, in, a.dtype, a.cuda_stream);
  else
    w.host().alltoallv(a.send, a.recv, matrix);
}

Prepared prepare(const Collective& c) {
  const char* fn = kind_text(c.kind);
  auto j = joined(fn);
  check_dtype(c.dtype);
  if (static_cast<unsigned>(c.kind) > static_cast<unsigned>(CollectiveKind::kReducescatter))
    throw Error("hvdrun: unknown collective kind " + std::to_string(static_cast<int>(c.kind)));
  auto* w = j->world.get();
  const int n = w->env().size;
  runtime::Kind kind = runtime::Kind::kAllreduce;
  if (c.kind == CollectiveKind::kAllreduce) {
    check_op(c.op);
    if (c.count > 0 && (c.send == nullptr || c.recv == nullptr))
      throw Error("hvdrun::allreduce: null buffer");
  } else if (c.kind == CollectiveKind::kBroadcast) {
    kind = runtime::Kind::kBroadcast;
    if (c.root < 0 || c.root >= n)
      throw Error("hvdrun::broadcast: root " + std::to_string(c.root) + " is not a rank (size " +
                  std::to_string(n) + ")");
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
  if (kind == runtime::Kind::kBroadcast) q.root = c.root;

  if (c.device) nccl(*w, fn);  // fails here, at submission, when NCCL is unavailable
  const bool small = !c.device && c.kind == CollectiveKind::kAllreduce &&
                     c.count * dtype_size(c.dtype) <= runtime::kInlineBytes;
  return Prepared{std::move(j), q, small ? c.send : nullptr};
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

// Moves a ready collective's data: `a`'s buffers, the round's agreed view `rd`.
void move_data(runtime::World& w, const Collective& a, const runtime::Ready& rd) {
  collective(w, rd.request, [&] {
    if (!a.device && a.kind != CollectiveKind::kAlltoall &&
        a.kind != CollectiveKind::kReducescatter) {
      const std::size_t ranks =
          a.kind == CollectiveKind::kAllgather ? static_cast<std::size_t>(w.env().size) : 1;
      prefer_huge_pages(a.recv, a.count * dtype_size(a.dtype) * ranks);
    }
    if (a.kind == CollectiveKind::kAlltoall) {
      alltoall(w, a);
    } else if (a.kind == CollectiveKind::kReducescatter) {
      const auto counts = slices(a, w.env().size);
      if (a.device)
        w.nccl()->reducescatter(a.send, a.recv, counts, a.dtype, a.op, a.cuda_stream);
      else
        w.host().reducescatter(a.send, a.recv, counts, a.dtype, a.op);
    } else if (a.device) {
      auto& dev = *w.nccl();
      if (a.kind == CollectiveKind::kAllreduce)
        dev.allreduce(a.send, a.recv, a.count, a.dtype, a.op, a.cuda_stream);
      else if (a.kind == CollectiveKind::kBroadcast)
        dev.broadcast(a.recv, a.count, a.dtype, a.root, a.cuda_stream);
      else
        dev.allgather(a.send, a.recv, a.count, a.dtype, a.cuda_stream);
    } else if (a.kind == CollectiveKind::kAllreduce && rd.inline_data) {
      runtime::reduce_inline(rd, a.recv, a.count, a.dtype, a.op);
    } else if (a.kind == CollectiveKind::kAllreduce) {
      w.host().allreduce(a.send, a.recv, a.count, a.dtype, a.op);
    } else if (a.kind == CollectiveKind::kBroadcast) {
      w.host().broadcast(a.recv, a.count * dtype_size(a.dtype), a.root);
    } else {
      w.host().allgather(a.send, a.recv, a.count * dtype_size(a.dtype));
    }
  });
}

// The body of a submitted collective: keeps its own copy of `c` (the pointers stay the
// caller's; names and shape are in the request).
runtime::Engine::Body body_of(const Prepared& p, const Collective& c) {
  return [w = p.j->world.get(), a = c](const runtime::Ready& rd) { move_data(*w, a, rd); };
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
  return p.j->engine->submit(p.request, body_of(p, c), nullptr, p.small_input);
}

Handle submit(const Collective& c, void (*then)(void*, long long), void* arg) {
  auto p = prepare(c);
  runtime::Engine::Body next;
  if (then != nullptr) next = [then, arg](const runtime::Ready& rd) { then(arg, rd.request.seq); };
  return p.j->engine->submit(p.request, body_of(p, c), std::move(next), p.small_input);
}

void run(const Collective& c) {
  auto p = prepare(c);
  // run() returns once the collective has run, so its body may refer to the caller's `c`
  // (small enough to need no allocation).
  auto* w = p.j->world.get();
  p.j->engine->run(
      p.request, [w, &c](const runtime::Ready& rd) { move_data(*w, c, rd); }, p.small_input);
}

std::int64_t sequence(Handle handle) { return joined("sequence")->engine->seq_of(handle); }

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

bool poll(Handle handle) { return joined("poll")->engine->poll(handle); }
void wait(Handle handle) { joined("wait")->engine->wait(handle); }
std::int64_t pending() { return joined("pending")->engine->pending(); }

int join() { return joined("join")->engine->join(); }

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
