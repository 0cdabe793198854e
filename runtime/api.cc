// The public C++ API (hvdrun/hvdrun.h): one process-wide World and the Engine that runs
// every collective in submission order, blocking or asynchronous, so calls from several
// threads are serialised in one order rather than interleaved on the wire.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>

#include "hvdrun/hvdrun.h"
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

std::shared_ptr<Joined> joined(const char* fn) {
  std::lock_guard lock(g_mu);
  if (!g_joined)
    throw Error(std::string("hvdrun::") + fn +
                "() called before hvdrun::init() (or after hvdrun::shutdown())");
  return g_joined;
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kUInt8:
      return "uint8";
  }
  return "?";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

void check_dtype(DataType t) {
  if (static_cast<unsigned>(t) > static_cast<unsigned>(DataType::kUInt8))
    throw Error("hvdrun: unknown data type " + std::to_string(static_cast<int>(t)));
}
void check_op(ReduceOp op) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::kProduct))
    throw Error("hvdrun: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

// What a collective is, for messages; turned into text only when something fails, so a
// successful call formats nothing.
struct Desc {
  const char* kind;  // "allreduce", "device broadcast", ...
  std::size_t count = 0;
  DataType dtype = DataType::kUInt8;
  const char* op = nullptr;  // reduction name, or nullptr
  int root = -1;             // broadcast root, or -1
  bool sized = true;         // false: just `kind` ("barrier")
};

std::string text(const Desc& d) {
  std::string s = d.kind;
  if (!d.sized) return s;
  s += " of " + std::to_string(d.count) + " " + dtype_name(d.dtype);
  if (d.op) s += std::string(" (") + d.op + ")";
  if (d.root >= 0) s += " from rank " + std::to_string(d.root);
  return s;
}

// Runs a collective, attaching what it was and where to any failure once.
template <typename Fn>
void collective(runtime::World& w, const Desc& d, Fn& fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("hvdrun: " + text(d) + " failed on rank " + std::to_string(w.env().rank) + " of " +
                std::to_string(w.env().size) + " (" + w.env().hostname + "): " + e.what() +
                ". A peer rank probably exited or lost its connection");
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

void init() {
  std::lock_guard lock(g_mu);
  if (g_joined) return;
  auto env = runtime::read_environment([](const char* n) { return std::getenv(n); });
  auto j = std::make_shared<Joined>();
  j->world = std::make_unique<runtime::World>(std::move(env));
  j->engine = std::make_unique<runtime::Engine>();
  g_joined = std::move(j);
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  return g_joined != nullptr;
}

void shutdown() {
  std::shared_ptr<Joined> j;
  {
    std::lock_guard lock(g_mu);
    j = std::move(g_joined);
  }
  if (!j) return;
  // Everything submitted runs first (the engine keeps submission order), then the final
  // barrier of leave() goes through the engine too, after the last collective. After a
  // failed collective the job is over: leave without waiting for peers that are gone.
  j->engine->drain();
  if (!j->engine->failure().empty()) {
    j->world->leave(false);
    return;
  }
  j->engine->run("shutdown", [&] { j->world->leave(); });
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

// One collective, checked and described: what the engine runs, blocking or not. The
// body's own type is kept, so a blocking call that runs inline allocates nothing.
template <typename Body>
struct Op {
  std::shared_ptr<Joined> j;
  Desc desc;
  Body body;
};
template <typename Body>
Op(std::shared_ptr<Joined>, Desc, Body) -> Op<Body>;

// Blocking: runs after everything submitted before it.
template <typename Body>
void run_now(Op<Body> op) {
  auto& w = *op.j->world;
  op.j->engine->run(op.desc.kind, [&] { collective(w, op.desc, op.body); });
}

// Asynchronous. The task may point at the World: the World outlives the engine, whose
// destructor runs every queued task first.
template <typename Body>
Handle submit(Op<Body> op) {
  auto* w = op.j->world.get();
  return op.j->engine->submit(
      op.desc.kind,
      [w, desc = op.desc, body = std::move(op.body)]() mutable { collective(*w, desc, body); });
}

auto allreduce_op(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  auto j = joined("allreduce");
  check_dtype(dtype);
  check_op(op);
  if (count > 0 && (send == nullptr || recv == nullptr))
    throw Error("hvdrun::allreduce: null buffer");
  auto* w = j->world.get();
  return Op{std::move(j), Desc{"allreduce", count, dtype, op_name(op)},
            [=] { w->host().allreduce(send, recv, count, dtype, op); }};
}

auto broadcast_op(void* buf, std::size_t count, DataType dtype, int root) {
  auto j = joined("broadcast");
  check_dtype(dtype);
  const int n = j->world->env().size;
  if (root < 0 || root >= n)
    throw Error("hvdrun::broadcast: root " + std::to_string(root) + " is not a rank (size " +
                std::to_string(n) + ")");
  if (count > 0 && buf == nullptr) throw Error("hvdrun::broadcast: null buffer");
  auto* w = j->world.get();
  return Op{std::move(j), Desc{"broadcast", count, dtype, nullptr, root},
            [=] { w->host().broadcast(buf, count * dtype_size(dtype), root); }};
}

auto allgather_op(const void* send, void* recv, std::size_t count, DataType dtype) {
  auto j = joined("allgather");
  check_dtype(dtype);
  if (count > 0 && (send == nullptr || recv == nullptr))
    throw Error("hvdrun::allgather: null buffer");
  auto* w = j->world.get();
  return Op{std::move(j), Desc{"allgather", count, dtype},
            [=] { w->host().allgather(send, recv, count * dtype_size(dtype)); }};
}

auto barrier_op() {
  auto j = joined("barrier");
  auto* w = j->world.get();
  Desc d{"barrier"};
  d.sized = false;
  return Op{std::move(j), d, [w] { w->barrier(); }};
}

runtime::NcclComm& nccl(runtime::World& w, const char* fn) {
  if (!w.nccl())
    throw Error(std::string("hvdrun::") + fn +
                ": device buffers need NCCL, which is unavailable: " + w.nccl_status());
  return *w.nccl();
}

// Device collectives fail at submission when NCCL is unavailable, like a bad argument.
auto allreduce_device_op(const void* send, void* recv, std::size_t count, DataType dtype,
                         ReduceOp op, void* stream) {
  auto j = joined("allreduce_device");
  check_dtype(dtype);
  check_op(op);
  auto* c = &nccl(*j->world, "allreduce_device");
  return Op{std::move(j), Desc{"device allreduce", count, dtype, op_name(op)},
            [=] { c->allreduce(send, recv, count, dtype, op, stream); }};
}

auto broadcast_device_op(void* buf, std::size_t count, DataType dtype, int root, void* stream) {
  auto j = joined("broadcast_device");
  check_dtype(dtype);
  auto* c = &nccl(*j->world, "broadcast_device");
  return Op{std::move(j), Desc{"device broadcast", count, dtype, nullptr, root},
            [=] { c->broadcast(buf, count, dtype, root, stream); }};
}

auto allgather_device_op(const void* send, void* recv, std::size_t count, DataType dtype,
                         void* stream) {
  auto j = joined("allgather_device");
  check_dtype(dtype);
  auto* c = &nccl(*j->world, "allgather_device");
  return Op{std::move(j), Desc{"device allgather", count, dtype},
            [=] { c->allgather(send, recv, count, dtype, stream); }};
}

}  // namespace

void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  run_now(allreduce_op(send, recv, count, dtype, op));
}
void broadcast(void* buf, std::size_t count, DataType dtype, int root) {
  run_now(broadcast_op(buf, count, dtype, root));
}
void allgather(const void* send, void* recv, std::size_t count, DataType dtype) {
  run_now(allgather_op(send, recv, count, dtype));
}
void barrier() { run_now(barrier_op()); }

Handle allreduce_async(const void* send, void* recv, std::size_t count, DataType dtype,
                       ReduceOp op) {
  return submit(allreduce_op(send, recv, count, dtype, op));
}
Handle broadcast_async(void* buf, std::size_t count, DataType dtype, int root) {
  return submit(broadcast_op(buf, count, dtype, root));
}
Handle allgather_async(const void* send, void* recv, std::size_t count, DataType dtype) {
  return submit(allgather_op(send, recv, count, dtype));
}
Handle barrier_async() { return submit(barrier_op()); }

void allreduce_device(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                      void* stream) {
  run_now(allreduce_device_op(send, recv, count, dtype, op, stream));
}
void broadcast_device(void* buf, std::size_t count, DataType dtype, int root, void* stream) {
  run_now(broadcast_device_op(buf, count, dtype, root, stream));
}
void allgather_device(const void* send, void* recv, std::size_t count, DataType dtype,
                      void* stream) {
  run_now(allgather_device_op(send, recv, count, dtype, stream));
}

Handle allreduce_device_async(const void* send, void* recv, std::size_t count, DataType dtype,
                              ReduceOp op, void* stream) {
  return submit(allreduce_device_op(send, recv, count, dtype, op, stream));
}
Handle broadcast_device_async(void* buf, std::size_t count, DataType dtype, int root,
                              void* stream) {
  return submit(broadcast_device_op(buf, count, dtype, root, stream));
}
Handle allgather_device_async(const void* send, void* recv, std::size_t count, DataType dtype,
                              void* stream) {
  return submit(allgather_device_op(send, recv, count, dtype, stream));
}

bool poll(Handle handle) { return joined("poll")->engine->poll(handle); }
void wait(Handle handle) { joined("wait")->engine->wait(handle); }
std::int64_t pending() { return joined("pending")->engine->pending(); }

int join() {
  auto j = joined("join");
  int last = -1;
  auto* w = j->world.get();
  Desc d{"join"};
  d.sized = false;
  auto body = [&] { last = w->join(); };
  j->engine->run("join", [&] { collective(*w, d, body); });
  return last;
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
