// The public API's collectives (hvdrun/hvdrun.h): each is checked at submission, agreed
// among the ranks by the engine, then moved through the host path or NCCL, for the whole
// job or a process set.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/log.h"
#include "hvdrun/hvdrun.h"
#include "runtime/api/api_state.h"
#include "runtime/core/timeline.h"
#include "runtime/engine/engine.h"
#include "runtime/semantics/semantics.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace hvdrun {

using api_detail::Joined;
using api_detail::joined;
using semantics::alltoall;
using semantics::check_splits;
using semantics::Group;
using semantics::slices;

namespace {

void check_dtype(DataType t) {
  if (static_cast<unsigned>(t) > static_cast<unsigned>(DataType::kUInt8))
    throw InvalidArgument("hvdrun: unknown data type " + std::to_string(static_cast<int>(t)));
}
void check_op(ReduceOp op) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::kProduct))
    throw InvalidArgument("hvdrun: unknown reduce op " + std::to_string(static_cast<int>(op)));
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
  std::shared_ptr<runtime::ProcessSet> set;  // held while the collective is in flight
  runtime::Engine* engine = nullptr;
  Group group;
  // The request: `own`, or a plain allreduce's kept by this thread (PlainAllreduce), which
  // the engine copies at submission. `own` is built only when needed: a Request is 176
  // bytes to clear.
  std::optional<runtime::Request> own;
  const runtime::Request* request = nullptr;
  const void* small_input = nullptr;  // carried in the round when small (Window::payload)
  std::uint64_t token = 0;            // names `request` (Engine::run), 0: none
  // The collective as the transports move it: its prescale applied (semantics::prescaled),
  // with the buffer that holds a scaled input when its output cannot.
  Collective moved;
  std::shared_ptr<std::vector<unsigned char>> scratch;
};

// The request of a plain host allreduce (no name, shape, type name or process set: what
// the C API's hvdrun_allreduce and a training loop's metric submit again and again), kept
// per thread with its token, so an unchanged call builds no request and the engine looks
// it up in its cache once.
struct PlainAllreduce {
  std::size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::uint64_t token = 0;  // 0: nothing kept yet
  runtime::Request request;
};

bool plain_allreduce(const Collective& c) {
  return c.kind == CollectiveKind::kAllreduce && !c.device && c.process_set == 0 &&
         c.name == nullptr && c.shape == nullptr && c.ndim == 0 && c.type_name == nullptr &&
         c.prescale == 1.0 && c.postscale == 1.0;
}

// Makes `m` the plain allreduce request of `count` elements of `dtype` reduced by `op`,
// with a token of its own.
[[gnu::noinline]] void renew(PlainAllreduce& m, std::size_t count, DataType dtype, ReduceOp op) {
  m.request =
      runtime::make_request(runtime::Kind::kAllreduce, count, dtype, nullptr, nullptr, 0, nullptr);
  m.request.op = static_cast<std::uint8_t>(op);
  m.count = count;
  m.dtype = dtype;
  m.op = op;
  m.token = runtime::Engine::new_token();
}

// This thread's plain allreduce request of `count` elements of `dtype` reduced by `op`.
const PlainAllreduce& plain_request(std::size_t count, DataType dtype, ReduceOp op) {
  thread_local PlainAllreduce last;
  // Its address is looked up once: left alone, the compiler looks it up again (a call into
  // the dynamic linker) for every later use rather than keep it in a register.
  PlainAllreduce* m = &last;
  __asm__("" : "+r"(m));
  if (m->token == 0 || m->count != count || m->dtype != dtype || m->op != op)
    renew(*m, count, dtype, op);
  return *m;
}

// Whether a host allreduce of `count` elements of `dtype` is small enough to be offered to
// the round (the engine applies its own limit, which is at most this).
bool carries_inline(std::size_t count, DataType dtype) {
  return count * runtime::element_bytes(dtype) <= runtime::kInlineCapacity;
}

// The checks an allreduce's arguments get at submission.
void check_allreduce(const void* send, const void* recv, std::size_t count, ReduceOp op) {
  check_op(op);
  if (count > 0 && (send == nullptr || recv == nullptr))
    throw InvalidArgument("hvdrun::allreduce: null buffer");
}

// The request for `c`, into `p` (with its token when plain).
void request_of(const Collective& c, runtime::Kind kind, Prepared& p) {
  if (plain_allreduce(c)) {
    const PlainAllreduce& m = plain_request(c.count, c.dtype, c.op);
    p.request = &m.request;
    p.token = m.token;
    return;
  }
  runtime::Request& q = p.own.emplace();
  p.request = &q;
  q = runtime::make_request(kind, c.count, c.dtype, c.name, c.shape, c.ndim, c.type_name);
  q.device = c.device ? 1 : 0;
  if (kind == runtime::Kind::kAllreduce || kind == runtime::Kind::kReducescatter) {
    q.op = static_cast<std::uint8_t>(c.op);
    q.prescale = c.prescale;
    q.postscale = c.postscale;
  }
}

// A process set this rank belongs to, held for a collective's duration.
std::shared_ptr<runtime::ProcessSet> member_set(Joined& j, int id, const char* fn) {
  std::lock_guard lock(j.sets_mu);
  auto it = j.sets.find(id);
  if (it == j.sets.end())
    throw InvalidArgument(
        std::string("hvdrun::") + fn + ": process set " + std::to_string(id) +
        " does not exist (never added, or removed); add it with add_process_set() "
        "on every rank first");
  if (it->second->rank < 0)
    throw InvalidArgument(std::string("hvdrun::") + fn + ": this rank (" +
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

Prepared prepare(const Collective& c) {
  const char* fn = kind_text(c.kind);
  auto j = joined(fn);
  check_dtype(c.dtype);
  if (static_cast<unsigned>(c.kind) > static_cast<unsigned>(CollectiveKind::kReducescatter))
    throw InvalidArgument("hvdrun: unknown collective kind " +
                          std::to_string(static_cast<int>(c.kind)));
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
    check_allreduce(c.send, c.recv, c.count, c.op);
  } else if (c.kind == CollectiveKind::kBroadcast) {
    kind = runtime::Kind::kBroadcast;
    if (c.root < 0 || c.root >= w->env().size)
      throw InvalidArgument("hvdrun::broadcast: root " + std::to_string(c.root) +
                            " is not a rank (size " + std::to_string(w->env().size) +
                            "); pass a rank from 0 to " + std::to_string(w->env().size - 1));
    if (p.set && p.set->ranks.end() == std::find(p.set->ranks.begin(), p.set->ranks.end(), c.root))
      throw InvalidArgument("hvdrun::broadcast: root " + std::to_string(c.root) +
                            " is not in process set " + std::to_string(p.set->id) + " (ranks " +
                            runtime::ranks_text(p.set->ranks) +
                            "); pass one of its ranks (a rank of the job)");
    if (c.count > 0 && c.recv == nullptr) throw InvalidArgument("hvdrun::broadcast: null buffer");
  } else if (c.kind == CollectiveKind::kAllgather) {
    kind = runtime::Kind::kAllgather;
    if (c.count > 0 && (c.send == nullptr || c.recv == nullptr))
      throw InvalidArgument("hvdrun::allgather: null buffer");
  } else if (c.kind == CollectiveKind::kAlltoall) {
    kind = runtime::Kind::kAlltoall;
    check_splits(c, n);
  } else {
    kind = runtime::Kind::kReducescatter;
    check_op(c.op);
    if (c.op != ReduceOp::kSum && c.op != ReduceOp::kAverage)
      throw InvalidArgument(
          "hvdrun::reducescatter: only Sum and Average are supported (as in Horovod)");
    if (c.ndim > 0 && c.shape == nullptr)
      throw InvalidArgument("hvdrun::reducescatter: shape has no values");
    // (A rank whose slice is empty may pass no output.)
    if (c.count > 0 && c.send == nullptr)
      throw InvalidArgument("hvdrun::reducescatter: null buffer");
  }
  if (c.ndim < 0 || (c.ndim > 0 && c.shape == nullptr))
    throw InvalidArgument(std::string("hvdrun::") + fn + ": shape has " + std::to_string(c.ndim) +
                          " dimensions but no values");
  request_of(c, kind, p);
  // The root is a rank of the job (as in Horovod); inside a set, its index there.
  if (kind == runtime::Kind::kBroadcast)
    p.own->root =
        p.set ? static_cast<int>(std::find(p.set->ranks.begin(), p.set->ranks.end(), c.root) -
                                 p.set->ranks.begin())
              : c.root;

  semantics::check_scales(c, fn);
  if (c.device) nccl(*w, fn);  // fails here, at submission, when NCCL is unavailable
  auto scaled = semantics::prescaled(c);
  p.moved = scaled.c;
  p.scratch = std::move(scaled.scratch);
  const bool small =
      !c.device && c.kind == CollectiveKind::kAllreduce && carries_inline(c.count, c.dtype);
  p.j = std::move(j);
  p.small_input = small ? p.moved.send : nullptr;
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
    semantics::postscale(a, a.kind == CollectiveKind::kReducescatter
                                ? counts[static_cast<std::size_t>(g.rank)]
                                : a.count);
  });
}

// Whether a host allreduce `a` among `g` can lead its round (runtime::Engine::Lead): every
// rank of `g` on one host, over shared memory, its input too large to ride in the round.
bool may_lead(const Group& g, const Collective& a) {
  return a.kind == CollectiveKind::kAllreduce && !a.device && g.size > 1 &&
         !carries_inline(a.count, a.dtype) && g.host().moves_used_bytes();
}

// What move_data() does for a host allreduce `a` among `g`, with the round's blocks riding
// in its first step (runtime::Engine::Lead): false, nothing written, when the ranks do not
// agree on it.
bool lead_data(const Group& g, const Collective& a, const runtime::Request& q,
               const runtime::ShmComm::Notes& notes) {
  bool finished = false;
  collective(*g.world, q, [&] {
    prefer_huge_pages(a.recv, a.count * dtype_size(a.dtype));
    finished = g.host().allreduce_agreed(a.send, a.recv, a.count, a.dtype, a.op, notes);
    if (finished) semantics::postscale(a, a.count);
  });
  return finished;
}

// The lead of `a` among `g` (its request `q`), for Engine::run(); `a`, `g` and `q` outlive
// the call.
runtime::Engine::Lead lead_of(const Group& g, const Collective& a, const runtime::Request& q) {
  return [&g, &a, &q](const void* mine, std::size_t used, void* all, std::size_t bytes,
                      const std::function<bool()>& agreed) {
    return lead_data(g, a, q, runtime::ShmComm::Notes{mine, used, all, bytes, &agreed});
  };
}

// The body of a submitted collective: keeps its own copy of `c` (the pointers stay the
// caller's; names and shape are in the request).
runtime::Engine::Body body_of(const Prepared& p) {
  return [g = p.group, set = p.set, a = p.moved, scratch = p.scratch](const runtime::Ready& rd) {
    move_data(g, a, rd);
  };
}

// allreduce() of an input too large to ride in the round: led by its data where it can.
// Out of line, so that the small allreduce's path stays as short as it was.
[[gnu::noinline]] void run_large(runtime::Engine& engine, const Group& g, const Collective& c,
                                 const runtime::Request& q, std::uint64_t token) {
  auto body = [&g, &c](const runtime::Ready& rd) { move_data(g, c, rd); };
  if (may_lead(g, c))
    engine.run(q, body, token, lead_of(g, c, q));
  else
    engine.run(q, body, nullptr, nullptr, token);
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
  return to_public(c.process_set, p.engine->submit(*p.request, body_of(p), nullptr, p.small_input));
}

Handle submit(const Collective& c, void (*then)(void*, long long), void* arg) {
  auto p = prepare(c);
  runtime::Engine::Body next;
  if (then != nullptr) next = [then, arg](const runtime::Ready& rd) { then(arg, rd.request.seq); };
  return to_public(c.process_set,
                   p.engine->submit(*p.request, body_of(p), std::move(next), p.small_input));
}

void run(const Collective& c) {
  auto p = prepare(c);
  // A small host allreduce whose inputs all ride in the round is reduced by the engine
  // straight into the output (what move_data would do with it, when there is no postscale
  // to apply after).
  const runtime::Engine::InlineResult result{c.recv, c.count, c.dtype, c.op};
  const bool engine_finishes = p.small_input != nullptr && c.postscale == 1.0;
  // run() returns once the collective has run, so its body may refer to `p` (small enough
  // to need no allocation).
  auto body = [&p](const runtime::Ready& rd) { move_data(p.group, p.moved, rd); };
  if (may_lead(p.group, p.moved))
    p.engine->run(*p.request, body, p.token, lead_of(p.group, p.moved, *p.request));
  else
    p.engine->run(*p.request, body, p.small_input, engine_finishes ? &result : nullptr, p.token);
}

std::int64_t sequence(Handle handle) {
  auto [engine, holds, h] = engine_of(handle, "sequence");
  return engine->seq_of(h);
}

void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  // run(reduce(...)) for the whole job's host buffers, without building the Collective and
  // the Prepared that run() needs for every other case: this is the C API's most frequent
  // call (a training loop's loss and metrics).
  const auto j = joined("allreduce");
  check_dtype(dtype);
  check_allreduce(send, recv, count, op);
  const PlainAllreduce& m = plain_request(count, dtype, op);
  const runtime::Environment& env = j->world->env();
  // What the body needs when the round does not carry the input, behind one pointer (a
  // std::function holds that without allocating).
  const struct {
    Group g;
    const void* send;
    void* recv;
    std::size_t count;
    DataType dtype;
    ReduceOp op;
  } a{{j->world.get(), nullptr, env.rank, env.size}, send, recv, count, dtype, op};
  if (!carries_inline(count, dtype)) {
    run_large(*j->engine, a.g, reduce(send, recv, count, dtype, op), m.request, m.token);
    return;
  }
  const runtime::Engine::InlineResult result{recv, count, dtype, op};
  j->engine->run(
      m.request,
      [&a](const runtime::Ready& rd) {
        move_data(a.g, reduce(a.send, a.recv, a.count, a.dtype, a.op), rd);
      },
      send, &result, m.token);
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

}  // namespace hvdrun
