// NCCL collectives (see nccl_comm.h; the unique-id exchange is nccl_bootstrap.cc). NCCL
// and the CUDA runtime are resolved with dlopen; nccl.h supplies only types and constants at
// build time.
#include "runtime/nccl/nccl_comm.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/env_names.h"
#include "common/seconds_text.h"
#include "runtime/core/generation_end.h"
#include "runtime/nccl/abort_on_end.h"
#include "runtime/nccl/cuda_lib.h"

#ifdef HVDRUN_HAVE_NCCL
#include <nccl.h>
#endif

namespace hvdrun::runtime {

using Clock = std::chrono::steady_clock;

#ifdef HVDRUN_HAVE_NCCL

namespace {

struct Nccl {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&::ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&::ncclCommAbort) abort = nullptr;
  decltype(&::ncclCommDestroy) destroy = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclBroadcast) broadcast = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclReduce) reduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  // Optional: ncclCommInitRankScalable exists from NCCL 2.23 on; null when older.
  decltype(&::ncclCommInitRankScalable) init_rank_scalable = nullptr;
  int version = 0;  // ncclGetVersion's code (22803 for 2.28.3), 0 when unknown
  std::string why;

  static const Nccl& get() {
    static Nccl n = [] {
      Nccl x;
      void* h = open_first({"libnccl.so.2", "libnccl.so"}, &x.why);
      if (!h) {
        x.why = "NCCL library not found (" + x.why + ")";
        return x;
      }
#define HVDRUN_NCCL_SYM(field, name) \
  x.field = reinterpret_cast<decltype(x.field)>(::dlsym(h, name));
      HVDRUN_NCCL_SYM(get_unique_id, "ncclGetUniqueId")
      HVDRUN_NCCL_SYM(init_rank_config, "ncclCommInitRankConfig")
      HVDRUN_NCCL_SYM(get_async_error, "ncclCommGetAsyncError")
      HVDRUN_NCCL_SYM(abort, "ncclCommAbort")
      HVDRUN_NCCL_SYM(destroy, "ncclCommDestroy")
      HVDRUN_NCCL_SYM(all_reduce, "ncclAllReduce")
      HVDRUN_NCCL_SYM(broadcast, "ncclBroadcast")
      HVDRUN_NCCL_SYM(all_gather, "ncclAllGather")
      HVDRUN_NCCL_SYM(error_string, "ncclGetErrorString")
      HVDRUN_NCCL_SYM(send, "ncclSend")
      HVDRUN_NCCL_SYM(recv, "ncclRecv")
      HVDRUN_NCCL_SYM(reduce, "ncclReduce")
      HVDRUN_NCCL_SYM(group_start, "ncclGroupStart")
      HVDRUN_NCCL_SYM(group_end, "ncclGroupEnd")
#undef HVDRUN_NCCL_SYM
      x.bind_scalable(h);
      if (!x.get_unique_id || !x.init_rank_config || !x.get_async_error || !x.abort || !x.destroy ||
          !x.all_reduce || !x.broadcast || !x.all_gather || !x.error_string)
        x.why = "the NCCL library found is too old (needs ncclCommInitRankConfig, NCCL >= 2.14)";
      return x;
    }();
    return n;
  }

  // Binds ncclCommInitRankScalable only when the library both exports it and reports a
  // version that has it (2.23.0 = code 22300), so a stub or backport is not trusted.
  void bind_scalable(void* h) {
    using VersionFn = ncclResult_t (*)(int*);
    auto get_version = reinterpret_cast<VersionFn>(::dlsym(h, "ncclGetVersion"));
    if (get_version == nullptr || get_version(&version) != ncclSuccess) version = 0;
    if (version >= 22300)
      init_rank_scalable =
          reinterpret_cast<decltype(init_rank_scalable)>(::dlsym(h, "ncclCommInitRankScalable"));
  }

  // Ids a communicator of `size` ranks is built from: one per HVDRUN_NCCL_RANKS_PER_ID
  // (default kNcclRanksPerId) ranks with the scalable init, else the single id of
  // ncclCommInitRankConfig.
  int id_count(int size) const {
    return init_rank_scalable != nullptr ? nccl_id_count(size, ranks_per_id()) : 1;
  }

  static int ranks_per_id() {
    const char* text = std::getenv(env_names::kNcclRanksPerId);
    if (text == nullptr || *text == '\0') return kNcclRanksPerId;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > env_names::kMaxRanks)
      throw Error(std::string(env_names::kNcclRanksPerId) + "='" + text +
                  "' is not a number of ranks from 1 to " + std::to_string(env_names::kMaxRanks) +
                  "; unset it for the default of " + std::to_string(kNcclRanksPerId));
    return static_cast<int>(v);
  }
};

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kUInt8:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

// A non-blocking communicator answers ncclInProgress while an operation (its own init, or
// enqueueing a collective) is under way, and NCCL asks that ncclCommGetAsyncError be polled
// until it leaves that state before the next call. Returns the state it settles in, or
// ncclInProgress when `deadline` passes or the generation ends (runtime/core/generation_end.h)
// first. `pause` between polls: zero yields.
ncclResult_t settle(ncclComm_t comm, ncclResult_t rc, Clock::time_point deadline,
                    std::chrono::microseconds pause) {
  while (rc == ncclInProgress) {
    if (Clock::now() >= deadline || generation_end().ended()) return ncclInProgress;
    if (pause.count() > 0)
      std::this_thread::sleep_for(pause);
    else
      std::this_thread::yield();
    if (auto q = Nccl::get().get_async_error(comm, &rc); q != ncclSuccess) return q;
  }
  return rc;
}

// cudaEventDisableTiming: the watchdog's events only mark completion.
constexpr unsigned kEventDisableTiming = 2;
// cudaErrorNotReady: the work before the event has not finished yet.
constexpr int kCudaNotReady = 600;

}  // namespace

struct NcclComm::State {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int device = 0;
  std::chrono::milliseconds op_timeout{0};
  // Events the watchdog has given back, for reuse (filled from its thread).
  std::mutex pool_mu;
  std::vector<void*> free_events;
  std::unique_ptr<DeviceWatchdog> watchdog;
  // The communicator is used under comm_mu (by a collective's enqueueing and the
  // watchdog's error check) until the generation's end aborts it, which frees it.
  std::mutex comm_mu;
  std::atomic<bool> aborted{false};
  std::string abort_reason;  // under comm_mu
  std::unique_ptr<AbortOnEnd> ender;

  // Collectives run on the library's engine thread, whose current CUDA device is its own:
  // make it this communicator's before NCCL and the watchdog's event touch the stream.
  void on_device() const {
    thread_local int current = -1;
    if (current == device) return;
    if (int rc = Cuda::get().set_device(device); rc != 0)
      throw Error("nccl: rank " + std::to_string(rank) + ": cudaSetDevice(" +
                  std::to_string(device) + "): " + Cuda::get().error_string(rc));
    current = device;
  }

  // The generation ended: aborts the communicator (on the watcher's thread), so the work
  // in flight on the GPU fails at once. The watchdog's checks stop with it.
  void abort(const std::string& why) {
    std::lock_guard lock(comm_mu);
    if (aborted.load() || comm == nullptr) return;
    abort_reason = why;
    aborted.store(true);
    Nccl::get().abort(comm);
  }

  // Runs `nccl_call` (which enqueues one collective on `stream`), waits out ncclInProgress
  // (under HVDRUN_OP_TIMEOUT, and no longer than the generation lasts), throws on an error,
  // and has the watchdog watch the collective.
  template <typename Call>
  void enqueue(const char* call, void* stream, const char* kind, std::size_t count, int root,
               Call nccl_call) {
    on_device();
    std::unique_lock lock(comm_mu);
    if (aborted.load()) {
      const std::string why = abort_reason;
      lock.unlock();
      generation_end().check();  // the mark's own message while the generation is over
      throw Error("nccl: " + std::string(call) + " on rank " + std::to_string(rank) +
                  ": the communicator was aborted when its generation ended: " + why);
    }
    ncclResult_t rc = nccl_call();
    if (rc == ncclInProgress) rc = settle(comm, rc, Clock::now() + op_timeout, {});
    lock.unlock();
    if (rc == ncclInProgress) generation_end().check();
    if (rc == ncclInProgress)
      throw Error(std::string("nccl: ") + call + " on rank " + std::to_string(rank) +
                  " was still being enqueued after " + seconds_text(op_timeout) +
                  " s (HVDRUN_OP_TIMEOUT); run with NCCL_DEBUG=WARN to see why NCCL is stuck");
    if (rc != ncclSuccess)
      throw Error(std::string("nccl: ") + call + " on rank " + std::to_string(rank) + ": " +
                  Nccl::get().error_string(rc));
    watch(stream, kind, count, root);
  }

  // Marks the work enqueued so far on `stream` for the watchdog. Best effort: an
  // operation no event can be recorded for goes unwatched (the launcher still ends the
  // job when a rank dies).
  void watch(void* stream, const char* kind, std::size_t count, int root) {
    const auto& cuda = Cuda::get();
    void* ev = nullptr;
    {
      std::lock_guard lock(pool_mu);
      if (!free_events.empty()) {
        ev = free_events.back();
        free_events.pop_back();
      }
    }
    if (ev == nullptr && cuda.event_create(&ev, kEventDisableTiming) != 0) return;
    if (cuda.event_record(ev, stream) != 0) {
      cuda.event_destroy(ev);
      return;
    }
    watchdog->track(ev, kind, count, root);
  }

  // Once initialised: the device watchdog over every collective, and the watcher that
  // aborts the communicator when its generation ends.
  void start_watching(int size) {
    State* st = this;
    DeviceWatchdog::Hooks hooks;
    // An aborted communicator's work is over: the watchdog lets it go.
    hooks.done = [st](void* ev) {
      return st->aborted.load() || Cuda::get().event_query(ev) != kCudaNotReady;
    };
    hooks.release = [st](void* ev) {
      std::lock_guard lock(st->pool_mu);
      st->free_events.push_back(ev);
    };
    hooks.async_error = [st]() -> std::string {
      // Skipped while a collective is being enqueued (it polls the same state), and after
      // the abort, which freed the communicator.
      std::unique_lock lock(st->comm_mu, std::try_to_lock);
      if (!lock.owns_lock() || st->aborted.load()) return {};
      ncclResult_t async = ncclSuccess;
      if (Nccl::get().get_async_error(st->comm, &async) != ncclSuccess) return {};
      if (async == ncclSuccess || async == ncclInProgress) return {};
      return Nccl::get().error_string(async);
    };
    watchdog = std::make_unique<DeviceWatchdog>(
        std::move(hooks), op_timeout,
        "rank " + std::to_string(rank) + " of " + std::to_string(size));
    ender = std::make_unique<AbortOnEnd>([st](const std::string& reason) { st->abort(reason); });
  }

  ~State() {
    ender.reset();     // joins its thread: no abort from here on
    watchdog.reset();  // joins its thread and gives every event back
    for (void* ev : free_events) Cuda::get().event_destroy(ev);
    if (comm && !aborted.load()) Nccl::get().destroy(comm);
  }
};

NcclComm::NcclComm(rendezvous::Store& store, const std::string& key, int rank, int size,
                   int local_rank, int local_size, Clock::time_point deadline,
                   std::chrono::milliseconds op_timeout)
    : s_(std::make_unique<State>()) {
  s_->rank = rank;
  const auto& nccl = Nccl::get();
  std::string why;
  int devices = cuda_device_count(&why);
  std::string local_problem;
  if (devices <= 0)
    local_problem = "no usable CUDA device (" + why + ")";
  else if (!nccl.get_unique_id)
    local_problem = nccl.why;
  // Rank 0 publishes either the id or its reason, so nobody waits for an id that will
  // never come; other ranks with a local problem fail at once.
  const int id_count = nccl.id_count(size);
  auto id_list = exchange_unique_ids(
      store, key, rank, size, id_count,
      [&]() -> std::string {
        if (!local_problem.empty()) throw std::runtime_error(local_problem);
        ncclUniqueId id;
        auto rc = nccl.get_unique_id(&id);
        if (rc != ncclSuccess)
          throw std::runtime_error(std::string("ncclGetUniqueId: ") + nccl.error_string(rc));
        return std::string(id.internal, sizeof id.internal);
      },
      time_left(deadline));
  if (!local_problem.empty())
    throw Error("nccl: rank " + std::to_string(rank) + ": " + local_problem);
  std::vector<ncclUniqueId> ids(id_list.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (id_list[i].size() != sizeof ids[i].internal)
      throw Error("nccl: unique id " + std::to_string(i) + " under '" + key +
                  "' has the wrong size");
    std::memcpy(ids[i].internal, id_list[i].data(), sizeof ids[i].internal);
  }

  // With --gpus-per-rank, hvdrun gave this rank its own CUDA_VISIBLE_DEVICES: its device is
  // the first one it sees.
  const char* own = std::getenv(env_names::kGpusPerRank);
  const bool own_gpus = own != nullptr && *own != '\0' && std::strcmp(own, "0") != 0;
  int dev = own_gpus ? 0 : local_rank % devices;
  s_->device = dev;
  if (int rc = Cuda::get().set_device(dev); rc != 0)
    throw Error("nccl: rank " + std::to_string(rank) + ": cudaSetDevice(" + std::to_string(dev) +
                "): " + Cuda::get().error_string(rc));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto fail = [&](const std::string& what) {
    if (s_->comm) nccl.abort(s_->comm);
    s_->comm = nullptr;
    throw Error("nccl: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " + what);
  };
  auto rc = ids.size() > 1
                ? nccl.init_rank_scalable(&s_->comm, size, rank, static_cast<int>(ids.size()),
                                          ids.data(), &config)
                : nccl.init_rank_config(&s_->comm, size, ids[0], rank, &config);
  auto state = settle(s_->comm, rc, deadline, std::chrono::milliseconds(1));
  if (state == ncclInProgress && generation_end().ended()) {
    nccl.abort(s_->comm);
    s_->comm = nullptr;
    generation_end().check();
  }
  if (state == ncclInProgress)
    fail(
        "NCCL init did not finish before the start timeout (a rank may be missing or "
        "the network between GPUs blocked; check NCCL_SOCKET_IFNAME)");
  if (state != ncclSuccess) {
    std::string what = std::string("NCCL init failed: ") + nccl.error_string(state);
    // The usual cause: more ranks on this host than GPUs, so two share one device,
    // which NCCL refuses.
    if (state == ncclInvalidUsage && local_size > devices)
      what += "; " + std::to_string(local_size) + " ranks on this host share " +
              std::to_string(devices) + " visible CUDA device" + (devices > 1 ? "s" : "") +
              " and NCCL needs one per rank: give this host at most " + std::to_string(devices) +
              " slot" + (devices > 1 ? "s" : "") + " (-H host:" + std::to_string(devices) +
              "), or set HVDRUN_NCCL=off for CPU collectives only";
    fail(what);
  }
  s_->op_timeout = op_timeout;

  s_->start_watching(size);
}

NcclComm::~NcclComm() = default;

int nccl_version() { return Nccl::get().version; }

void NcclComm::allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                         ReduceOp op, void* stream) {
  s_->enqueue("ncclAllReduce", stream, "allreduce", count, -1, [&] {
    return Nccl::get().all_reduce(send, recv, count, nccl_type(dtype), nccl_op(op), s_->comm,
                                  static_cast<cudaStream_t>(stream));
  });
}
void NcclComm::broadcast(void* buf, std::size_t count, DataType dtype, int root, void* stream) {
  s_->enqueue("ncclBroadcast", stream, "broadcast", count, root, [&] {
    return Nccl::get().broadcast(buf, buf, count, nccl_type(dtype), root, s_->comm,
                                 static_cast<cudaStream_t>(stream));
  });
}
void NcclComm::allgather(const void* send, void* recv, std::size_t count, DataType dtype,
                         void* stream) {
  s_->enqueue("ncclAllGather", stream, "allgather", count, -1, [&] {
    return Nccl::get().all_gather(send, recv, count, nccl_type(dtype), s_->comm,
                                  static_cast<cudaStream_t>(stream));
  });
}

namespace {

// Runs `calls` between ncclGroupStart and ncclGroupEnd; returns the first failure's code.
template <typename Fn>
ncclResult_t grouped(const Nccl& nccl, Fn calls) {
  if (!nccl.group_start || !nccl.group_end || !nccl.send || !nccl.recv || !nccl.reduce)
    return ncclInvalidUsage;
  ncclResult_t rc = nccl.group_start();
  if (rc != ncclSuccess) return rc;
  const ncclResult_t inner = calls();
  rc = nccl.group_end();
  return inner != ncclSuccess ? inner : rc;
}

}  // namespace

void NcclComm::alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                         const std::vector<std::size_t>& recv_counts, DataType dtype,
                         void* stream) {
  const auto& nccl = Nccl::get();
  const std::size_t es = dtype_size(dtype);
  auto* st = static_cast<cudaStream_t>(stream);
  const std::size_t total = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
  s_->enqueue("ncclSend/ncclRecv", stream, "alltoall", total, -1, [&] {
    return grouped(nccl, [&] {
      std::size_t out = 0, in = 0;
      for (std::size_t peer = 0; peer < send_counts.size(); ++peer) {
        const int p = static_cast<int>(peer);
        if (send_counts[peer] > 0) {
          auto r = nccl.send(static_cast<const char*>(send) + out * es, send_counts[peer],
                             nccl_type(dtype), p, s_->comm, st);
          if (r != ncclSuccess) return r;
        }
        if (recv_counts[peer] > 0) {
          auto r = nccl.recv(static_cast<char*>(recv) + in * es, recv_counts[peer],
                             nccl_type(dtype), p, s_->comm, st);
          if (r != ncclSuccess) return r;
        }
        out += send_counts[peer];
        in += recv_counts[peer];
      }
      return ncclSuccess;
    });
  });
}

void NcclComm::reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                             DataType dtype, ReduceOp op, void* stream) {
  const auto& nccl = Nccl::get();
  const std::size_t es = dtype_size(dtype);
  // One reduce per slice, rooted at its rank, in one group: slices may differ in size
  // (Horovod's rule for an uneven first dimension), which ncclReduceScatter does not allow.
  const std::size_t first_count = counts.empty() ? 0 : counts[0];
  s_->enqueue("ncclReduce", stream, "reducescatter", first_count, -1, [&] {
    return grouped(nccl, [&] {
      std::size_t first = 0;
      for (std::size_t r = 0; r < counts.size(); ++r) {
        if (counts[r] > 0) {
          auto rr = nccl.reduce(static_cast<const char*>(send) + first * es, recv, counts[r],
                                nccl_type(dtype), nccl_op(op), static_cast<int>(r), s_->comm,
                                static_cast<cudaStream_t>(stream));
          if (rr != ncclSuccess) return rr;
        }
        first += counts[r];
      }
      return ncclSuccess;
    });
  });
}

void NcclComm::allreduce_from_host(const void* host, std::size_t count, DataType dtype,
                                   ReduceOp op) {
  const auto& cuda = Cuda::get();
  if (!cuda.malloc || !cuda.free || !cuda.memcpy || !cuda.stream_synchronize)
    throw Error("nccl: rank " + std::to_string(s_->rank) +
                ": the CUDA runtime lacks cudaMalloc, cudaFree, cudaMemcpy or "
                "cudaStreamSynchronize, which a joined rank needs to stand in on the GPU");
  s_->on_device();
  const std::size_t bytes = count * dtype_size(dtype);
  void* dev = nullptr;
  auto check = [&](int rc, const char* call) {
    if (rc != 0)
      throw Error("nccl: rank " + std::to_string(s_->rank) + ": " + call + " of " +
                  std::to_string(bytes) +
                  " bytes for a joined rank's stand-in: " + cuda.error_string(rc));
  };
  check(cuda.malloc(&dev, bytes), "cudaMalloc");
  struct Free {
    const Cuda& c;
    void* p;
    ~Free() { c.free(p); }
  } release{cuda, dev};
  constexpr int kHostToDevice = 1;  // cudaMemcpyHostToDevice
  check(cuda.memcpy(dev, host, bytes, kHostToDevice), "cudaMemcpy");
  allreduce(dev, dev, count, dtype, op, nullptr);
  check(cuda.stream_synchronize(nullptr), "cudaStreamSynchronize");
}

#else  // !HVDRUN_HAVE_NCCL

struct NcclComm::State {};

NcclComm::NcclComm(rendezvous::Store& store, const std::string& key, int rank, int, int, int,
                   Clock::time_point deadline, std::chrono::milliseconds) {
  const std::string why = "this libhvdrun was built without NCCL (configure with nccl.h found)";
  exchange_unique_id(
      store, key, rank, [&]() -> std::string { throw std::runtime_error(why); },
      time_left(deadline));
  throw Error("nccl: " + why);
}
NcclComm::~NcclComm() = default;
int nccl_version() { return 0; }
void NcclComm::allreduce(const void*, void*, std::size_t, DataType, ReduceOp, void*) {}
void NcclComm::broadcast(void*, std::size_t, DataType, int, void*) {}
void NcclComm::allgather(const void*, void*, std::size_t, DataType, void*) {}
void NcclComm::alltoallv(const void*, const std::vector<std::size_t>&, void*,
                         const std::vector<std::size_t>&, DataType, void*) {}
void NcclComm::reducescatter(const void*, void*, const std::vector<std::size_t>&, DataType,
                             ReduceOp, void*) {}
void NcclComm::allreduce_from_host(const void*, std::size_t, DataType, ReduceOp) {}

#endif

}  // namespace hvdrun::runtime
