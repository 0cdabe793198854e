// The public C++ API (hvdrun/hvdrun.h): one process-wide World behind a mutex, so calls
// from several threads are serialised rather than interleaved on the wire.
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "hvdrun/hvdrun.h"
#include "runtime/world.h"

namespace hvdrun {

Error::~Error() = default;

namespace {

std::mutex g_mu;
// Deliberately never destroyed at exit: leaving the job needs the network and logging,
// which static destruction may already have torn down. shutdown() releases it.
std::unique_ptr<runtime::World>& g_world = *new std::unique_ptr<runtime::World>;

runtime::World& world(const char* fn) {
  if (!g_world)
    throw Error(std::string("hvdrun::") + fn +
                "() called before hvdrun::init() (or after hvdrun::shutdown())");
  return *g_world;
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

// Runs a collective, attaching what it was and where to any failure once.
template <typename Fn>
void collective(runtime::World& w, const std::string& what, Fn fn) {
  try {
    fn();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("hvdrun: " + what + " failed on rank " + std::to_string(w.env().rank) + " of " +
                std::to_string(w.env().size) + " (" + w.env().hostname + "): " + e.what() +
                ". A peer rank probably exited or lost its connection");
  }
}

std::string describe(const char* name, std::size_t count, DataType t) {
  return std::string(name) + " of " + std::to_string(count) + " " + dtype_name(t);
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
  if (g_world) return;
  auto env = runtime::read_environment([](const char* n) { return std::getenv(n); });
  g_world = std::make_unique<runtime::World>(std::move(env));
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  return g_world != nullptr;
}

void shutdown() {
  std::lock_guard lock(g_mu);
  if (g_world) g_world->leave();
  g_world.reset();
}

int rank() {
  std::lock_guard lock(g_mu);
  return world("rank").env().rank;
}
int size() {
  std::lock_guard lock(g_mu);
  return world("size").env().size;
}
int local_rank() {
  std::lock_guard lock(g_mu);
  return world("local_rank").env().local_rank;
}
int local_size() {
  std::lock_guard lock(g_mu);
  return world("local_size").env().local_size;
}
int cross_rank() {
  std::lock_guard lock(g_mu);
  return world("cross_rank").env().cross_rank;
}
int cross_size() {
  std::lock_guard lock(g_mu);
  return world("cross_size").env().cross_size;
}

void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  std::lock_guard lock(g_mu);
  auto& w = world("allreduce");
  check_dtype(dtype);
  check_op(op);
  if (count > 0 && (send == nullptr || recv == nullptr))
    throw Error("hvdrun::allreduce: null buffer");
  if (send != recv && count > 0) std::memmove(recv, send, count * dtype_size(dtype));
  collective(w, describe("allreduce", count, dtype) + " (" + op_name(op) + ")",
             [&] { w.gloo().allreduce(recv, count, dtype, op); });
}

void broadcast(void* buf, std::size_t count, DataType dtype, int root) {
  std::lock_guard lock(g_mu);
  auto& w = world("broadcast");
  check_dtype(dtype);
  if (root < 0 || root >= w.env().size)
    throw Error("hvdrun::broadcast: root " + std::to_string(root) + " is not a rank (size " +
                std::to_string(w.env().size) + ")");
  if (count > 0 && buf == nullptr) throw Error("hvdrun::broadcast: null buffer");
  collective(w, describe("broadcast", count, dtype) + " from rank " + std::to_string(root),
             [&] { w.gloo().broadcast(buf, count * dtype_size(dtype), root); });
}

void allgather(const void* send, void* recv, std::size_t count, DataType dtype) {
  std::lock_guard lock(g_mu);
  auto& w = world("allgather");
  check_dtype(dtype);
  if (count > 0 && (send == nullptr || recv == nullptr))
    throw Error("hvdrun::allgather: null buffer");
  collective(w, describe("allgather", count, dtype),
             [&] { w.gloo().allgather(send, recv, count * dtype_size(dtype)); });
}

void barrier() {
  std::lock_guard lock(g_mu);
  auto& w = world("barrier");
  collective(w, "barrier", [&] { w.barrier(); });
}

bool nccl_available() {
  std::lock_guard lock(g_mu);
  return g_world && g_world->nccl() != nullptr;
}

std::string nccl_status() {
  std::lock_guard lock(g_mu);
  if (!g_world) return "hvdrun::init() has not been called";
  return g_world->nccl_status();
}

namespace {
runtime::NcclComm& nccl(const char* fn) {
  auto& w = world(fn);
  if (!w.nccl())
    throw Error(std::string("hvdrun::") + fn +
                ": device buffers need NCCL, which is unavailable: " + w.nccl_status());
  return *w.nccl();
}
}  // namespace

void allreduce_device(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                      void* stream) {
  std::lock_guard lock(g_mu);
  check_dtype(dtype);
  check_op(op);
  nccl("allreduce_device").allreduce(send, recv, count, dtype, op, stream);
}

void broadcast_device(void* buf, std::size_t count, DataType dtype, int root, void* stream) {
  std::lock_guard lock(g_mu);
  check_dtype(dtype);
  nccl("broadcast_device").broadcast(buf, count, dtype, root, stream);
}

void allgather_device(const void* send, void* recv, std::size_t count, DataType dtype,
                      void* stream) {
  std::lock_guard lock(g_mu);
  check_dtype(dtype);
  nccl("allgather_device").allgather(send, recv, count, dtype, stream);
}

const char* version() { return HVDRUN_VERSION; }

}  // namespace hvdrun
