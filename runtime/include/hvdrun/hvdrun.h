// libhvdrun's C++ API: join the job hvdrun launched (init reads the HVDRUN_* environment
// and rendezvouses with the other ranks), then run collectives: host buffers over Gloo,
// device buffers over NCCL on a CUDA stream. Errors are thrown as hvdrun::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__GNUC__)
#define HVDRUN_API __attribute__((visibility("default")))
#else
#define HVDRUN_API
#endif

namespace hvdrun {

/// Element types of collective buffers.
enum class DataType { kInt32, kInt64, kFloat32, kFloat64, kFloat16, kBFloat16, kUInt8 };

/// Reductions. kAverage is the sum divided by size() (integer division for integers).
enum class ReduceOp { kSum, kAverage, kMin, kMax, kProduct };

/// Every failure of the library: not launched by hvdrun, rendezvous timeout (naming the
/// missing ranks), a peer lost during a collective, a bad argument.
class HVDRUN_API Error : public std::runtime_error {
 public:
  /// `message` says what failed, where and what to do next.
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  ~Error() override;
};

/// Joins the job: reads HVDRUN_* from the environment, connects to the rendezvous,
/// checks in with every other rank within HVDRUN_START_TIMEOUT, builds the Gloo
/// communicator and, when every rank has a GPU and NCCL is available, the NCCL one.
/// Idempotent. Throws Error.
HVDRUN_API void init();
/// True between init() and shutdown().
HVDRUN_API bool is_initialized();
/// Leaves the job and releases communicators. Idempotent.
HVDRUN_API void shutdown();

/// This process's rank in [0, size()).
HVDRUN_API int rank();
/// Number of ranks in the job.
HVDRUN_API int size();
/// Rank among the ranks on this host.
HVDRUN_API int local_rank();
/// Number of ranks on this host.
HVDRUN_API int local_size();
/// Index of this host (among hosts that run this local_rank).
HVDRUN_API int cross_rank();
/// Number of hosts that run this local_rank.
HVDRUN_API int cross_size();

/// Bytes per element of `dtype`.
HVDRUN_API std::size_t dtype_size(DataType dtype);

/// Reduces `count` elements across ranks; in place when send == recv. Host memory.
HVDRUN_API void allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                          ReduceOp op = ReduceOp::kSum);
/// Copies `count` elements of `buf` from rank `root` to every rank. Host memory.
HVDRUN_API void broadcast(void* buf, std::size_t count, DataType dtype, int root);
/// Gathers `count` elements from each rank, in rank order, into `recv` (size()*count).
HVDRUN_API void allgather(const void* send, void* recv, std::size_t count, DataType dtype);
/// Returns once every rank has entered it; names the missing ranks on timeout.
HVDRUN_API void barrier();

/// True when an NCCL communicator was built (device collectives available).
HVDRUN_API bool nccl_available();
/// Why NCCL is unavailable ("" when it is available).
HVDRUN_API std::string nccl_status();
/// allreduce on device memory through NCCL, enqueued on `cuda_stream` (a cudaStream_t;
/// nullptr is the default stream). Returns once enqueued.
HVDRUN_API void allreduce_device(const void* send, void* recv, std::size_t count, DataType dtype,
                                 ReduceOp op, void* cuda_stream);
/// broadcast on device memory through NCCL, enqueued on `cuda_stream`.
HVDRUN_API void broadcast_device(void* buf, std::size_t count, DataType dtype, int root,
                                 void* cuda_stream);
/// allgather on device memory through NCCL, enqueued on `cuda_stream`.
HVDRUN_API void allgather_device(const void* send, void* recv, std::size_t count, DataType dtype,
                                 void* cuda_stream);

/// Library version, e.g. "0.1.0".
HVDRUN_API const char* version();

/// DataType of a C++ element type (int32_t, int64_t, float, double, uint8_t).
template <typename T>
constexpr DataType dtype_of();
/// @cond
template <>
constexpr DataType dtype_of<std::int32_t>() {
  return DataType::kInt32;
}
template <>
constexpr DataType dtype_of<std::int64_t>() {
  return DataType::kInt64;
}
template <>
constexpr DataType dtype_of<float>() {
  return DataType::kFloat32;
}
template <>
constexpr DataType dtype_of<double>() {
  return DataType::kFloat64;
}
template <>
constexpr DataType dtype_of<std::uint8_t>() {
  return DataType::kUInt8;
}
/// @endcond

/// Typed allreduce in place.
template <typename T>
void allreduce(T* buf, std::size_t count, ReduceOp op = ReduceOp::kSum) {
  allreduce(buf, buf, count, dtype_of<T>(), op);
}
/// Typed broadcast.
template <typename T>
void broadcast(T* buf, std::size_t count, int root) {
  broadcast(buf, count, dtype_of<T>(), root);
}

}  // namespace hvdrun
