// libhvdrun's C++ API: join the job hvdrun launched (init reads the HVDRUN_* environment
// and rendezvouses with the other ranks), then run collectives: host buffers through shared
// memory and the host leaders' frame mesh, device buffers over NCCL on a CUDA stream,
// blocking or asynchronously (handles). Every collective, from any thread, runs in
// submission order on one background thread of the library, so ranks that submit the same
// collectives in the same order never deadlock. Errors are thrown as hvdrun::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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

/// A call whose own arguments are wrong, found on this rank when it was submitted and
/// before any data moved: an unknown element type, op or process set, a process set this
/// rank is not in, a root outside the set, a null buffer, splits that do not add up. The
/// job goes on (Horovod's invalid argument: ValueError in torch, InvalidArgumentError in
/// TensorFlow), where other failures end it or fail the collective on every rank.
class HVDRUN_API InvalidArgument : public Error {
 public:
  using Error::Error;
  ~InvalidArgument() override;
};

/// Joins the job: reads HVDRUN_* from the environment, connects to the rendezvous,
/// checks in with every other rank within HVDRUN_START_TIMEOUT, builds the Gloo
/// communicator and, when every rank has a GPU and NCCL is available, the NCCL one.
/// With none of hvdrun's job variables set (a program started without hvdrun), runs as a
/// single process, rank 0 of 1, and logs one info line saying so. Idempotent. Throws Error.
HVDRUN_API void init();
/// Leaves the job at once without agreeing with the other ranks, as at process exit:
/// collectives still queued fail, and the other ranks see this rank gone (its exit, not a
/// shutdown, is then what the launcher reports). Idempotent. Never throws.
HVDRUN_API void leave() noexcept;
/// True between init() and shutdown().
HVDRUN_API bool is_initialized();
/// Waits for every submitted collective, leaves the job and releases communicators.
/// Idempotent.
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
/// True when every host runs the same number of ranks (Horovod's is_homogeneous()); the
/// same answer on every rank, agreed when the ranks checked in.
HVDRUN_API bool is_homogeneous();

/// HVDRUN_GENERATION of this job (0 unless an elastic launcher restarted it).
HVDRUN_API int generation();

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

/// Identifies a submitted asynchronous collective until wait() is called on it.
using Handle = std::int64_t;

/// Submits allreduce (as above) and returns at once. `send` and `recv` must stay valid
/// and untouched until wait() returns for the handle.
HVDRUN_API Handle allreduce_async(const void* send, void* recv, std::size_t count, DataType dtype,
                                  ReduceOp op = ReduceOp::kSum);
/// Submits broadcast (as above) and returns at once.
HVDRUN_API Handle broadcast_async(void* buf, std::size_t count, DataType dtype, int root);
/// Submits allgather (as above) and returns at once.
HVDRUN_API Handle allgather_async(const void* send, void* recv, std::size_t count, DataType dtype);
/// Submits a barrier and returns at once.
HVDRUN_API Handle barrier_async();
/// Submits allreduce_device; the handle completes once NCCL has enqueued it on the stream.
HVDRUN_API Handle allreduce_device_async(const void* send, void* recv, std::size_t count,
                                         DataType dtype, ReduceOp op, void* cuda_stream);
/// Submits broadcast_device; completes once enqueued on the stream.
HVDRUN_API Handle broadcast_device_async(void* buf, std::size_t count, DataType dtype, int root,
                                         void* cuda_stream);
/// Submits allgather_device; completes once enqueued on the stream.
HVDRUN_API Handle allgather_device_async(const void* send, void* recv, std::size_t count,
                                         DataType dtype, void* cuda_stream);
/// True once the collective behind `handle` has finished, successfully or not. Throws
/// Error for a handle that is unknown or already waited for.
HVDRUN_API bool poll(Handle handle);
/// Waits for the collective behind `handle`, releases the handle and throws its Error if
/// it failed. After one collective fails, every later one fails with that cause.
HVDRUN_API void wait(Handle handle);
/// Number of submitted collectives not yet waited for.
HVDRUN_API std::int64_t pending();
/// Declares that this rank has no more work: until every rank has joined, it stands in
/// for the collectives the others still submit (an allreduce gets zeros for Sum and
/// Average, the op's identity otherwise; a barrier completes; an allgather or broadcast
/// fails on the ranks that submitted it, as in Horovod). Returns the rank that joined
/// last, the same on every rank.
HVDRUN_API int join();

/// The collectives submit() and run() take.
enum class CollectiveKind { kAllreduce, kBroadcast, kAllgather, kAlltoall, kReducescatter };

/// One collective with everything the ranks agree on before its data moves. Each rank's
/// description of it must match (kind, element type and count, shape, op, root, scale
/// factors, device); a mismatch fails it on every rank that submitted it with an Error
/// naming both sides, and the job goes on. Named collectives are matched by name across
/// ranks in any order; unnamed ones by their order among the rank's unnamed collectives.
struct Collective {
  CollectiveKind kind = CollectiveKind::kAllreduce;  ///< what to run
  const void* send = nullptr;           ///< input (allreduce, allgather); unused by broadcast
  void* recv = nullptr;                 ///< output (in place when == send); broadcast's buffer
  std::size_t count = 0;                ///< elements (per rank for allgather)
  DataType dtype = DataType::kFloat32;  ///< element type moved
  ReduceOp op = ReduceOp::kSum;         ///< allreduce's reduction
  int root = 0;                         ///< broadcast's root rank
  bool device = false;                  ///< buffers are CUDA device memory (NCCL)
  void* cuda_stream = nullptr;          ///< device: the cudaStream_t to enqueue on
  /// Matched by this name on every rank when set (at most one collective of a name in
  /// flight per rank); unnamed collectives match by order.
  const char* name = nullptr;
  const std::int64_t* shape = nullptr;  ///< the shape ([count] if null), copied
  int ndim = 0;                         ///< entries in `shape`
  const char* type_name = nullptr;      ///< the caller's element type ("int8"), for checks
  /// Multiplies the input before a reduction (allreduce, reducescatter), applied by the
  /// library to host buffers with Horovod's arithmetic (docs/runtime.md); agreed by every rank.
  double prescale = 1.0;
  /// Multiplies the result after a reduction (after Average's division), as prescale.
  double postscale = 1.0;
  /// Alltoall: elements of `send` (`count` in all) for each rank, size() entries in rank
  /// order; null splits `count` equally (it must divide). Only the first dimension may
  /// differ between ranks.
  const std::int64_t* splits = nullptr;
  /// Alltoall: filled with the elements received from each rank (size() entries); may be
  /// null.
  std::int64_t* received_splits = nullptr;
  /// The process set the collective runs in (add_process_set()); 0: every rank.
  int process_set = 0;
  /// Alltoall: elements `recv` can hold; checked on every rank before data moves.
  /// Reducescatter ignores it: `recv` holds this rank's slice, the first dimension
  /// (shape[0], or `count` without a shape) split as Horovod does (ranks below rows %
  /// size() get one row more).
  std::size_t recv_count = 0;
  /// The caller applies prescale and postscale itself; the library only checks that the
  /// ranks agree on them. Device buffers need it (the library has no device scaling yet,
  /// and refuses factors other than 1 on device buffers without it).
  bool caller_scales = false;
};

/// Adds a process set: a subset of ranks whose collectives (Collective::process_set) run
/// among its members only, with their own communicators. Collective over every rank of the
/// job, which must pass the same ranks, in the same order of calls. Returns its id (> 0,
/// the same on every rank). Throws DuplicateProcessSet when a set of these ranks exists.
HVDRUN_API int add_process_set(const std::vector<int>& ranks);
/// Removes process set `id` (collective over every rank): what its members still agree
/// on runs, then its communicators close. False when there is no such set.
HVDRUN_API bool remove_process_set(int id);
/// The ranks of process set `id` (0: every rank), ascending. Throws for an unknown id.
HVDRUN_API std::vector<int> process_set_ranks(int id);
/// The rows of this rank's slice when reduce-scatter splits a first dimension of `rows`
/// among process set `process_set` (0: every rank): ranks below rows % size get one row
/// more, as in Horovod. What a caller sizes its output by. Throws for an unknown set or
/// one this rank is not in.
HVDRUN_API std::int64_t reducescatter_rows(std::int64_t rows, int process_set = 0);

/// add_process_set() of ranks that already form a set (every rank of the job: set 0).
class HVDRUN_API DuplicateProcessSet : public Error {
 public:
  DuplicateProcessSet(int existing, const std::vector<int>& ranks);
  ~DuplicateProcessSet() override;
  /// The id of the set with those ranks.
  int existing() const { return existing_; }

 private:
  int existing_;
};

/// Starts recording a timeline of every collective (Chrome's trace format, as Horovod's
/// HOROVOD_TIMELINE) into `path` on rank 0; `mark_cycles` adds a marker per negotiation
/// round. Other ranks record nothing. A file that cannot be opened safely (a link, FIFO,
/// directory or another user's file, docs/security.md) or written is a warning on stderr,
/// and the job goes on without a timeline, as under Horovod.
HVDRUN_API void start_timeline(const std::string& path, bool mark_cycles = false);
/// Stops the timeline and completes its file.
HVDRUN_API void stop_timeline();

/// Submits `c` and returns at once. Buffers must stay valid and untouched until wait()
/// returns. Throws Error (a name already in flight on this rank, a bad argument).
HVDRUN_API Handle submit(const Collective& c);
/// As submit(); `then(arg, seq)` runs on the library's thread right after the collective
/// succeeded and before its handle completes (never after a failure), with the agreed
/// position of the collective among unnamed ones (-1 when named). It may submit the next
/// step of a composite operation: that step then follows at the same point of the agreed
/// order on every rank (name it after `seq` or the first step's name).
HVDRUN_API Handle submit(const Collective& c, void (*then)(void*, long long), void* arg);
/// Runs `c` and returns once it has completed (device: once enqueued). Throws Error.
HVDRUN_API void run(const Collective& c);
/// The position of the unnamed collective behind `handle` among this rank's unnamed
/// collectives (the same on every rank for the same collective), or -1 when named.
HVDRUN_API std::int64_t sequence(Handle handle);

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
