// The GPU communicator: NCCL, loaded at run time (dlopen) so libhvdrun works on hosts
// without CUDA. Bootstrap goes through the rendezvous store: rank 0 (with NCCL's scalable
// init, one rank per 128) publishes the ncclUniqueId (or why it could not make one) under
// the communicator's key, the others wait for it; init is non-blocking and polled under
// the start deadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "rendezvous/store.h"
#include "runtime/nccl/device_watchdog.h"
#include "runtime/nccl/nccl_bootstrap.h"

namespace hvdrun::runtime {

/// Number of CUDA devices visible, or -1 with `why` set when CUDA is unusable here.
int cuda_device_count(std::string* why);

/// The loaded NCCL's version code (22803 for 2.28.3), or 0 when none loads or the build
/// has no NCCL path.
int nccl_version();

/// An NCCL communicator over all ranks.
class NcclComm {
 public:
  /// Builds the communicator: picks device local_rank % devices (device 0 under
  /// --gpus-per-rank, HVDRUN_GPUS_PER_RANK), exchanges the unique id
  /// under `key` (with an NCCL of 2.23 or later and more than 128 ranks, one id per 128
  /// ranks under nccl_id_key(key, i), for ncclCommInitRankScalable; else one id for
  /// ncclCommInitRankConfig), initialises without blocking and aborts at `deadline`. Throws Error
  /// (fast when there is no GPU or no NCCL; naming the cause when local_size ranks
  /// share fewer GPUs). Then watches every collective (DeviceWatchdog): one that has not
  /// completed `op_timeout` after it was enqueued, or an asynchronous NCCL error, ends
  /// the process with a message.
  NcclComm(rendezvous::Store& store, const std::string& key, int rank, int size, int local_rank,
           int local_size, std::chrono::steady_clock::time_point deadline,
           std::chrono::milliseconds op_timeout);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  /// Enqueues an allreduce on `stream`.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 void* stream);
  /// Enqueues a broadcast on `stream`.
  void broadcast(void* buf, std::size_t count, DataType dtype, int root, void* stream);
  /// Enqueues an allgather on `stream`.
  void allgather(const void* send, void* recv, std::size_t count, DataType dtype, void* stream);
  /// Enqueues an alltoallv: send_counts[j] elements to rank j, recv_counts[i] elements
  /// from rank i, blocks in rank order (grouped ncclSend/ncclRecv).
  void alltoallv(const void* send, const std::vector<std::size_t>& send_counts, void* recv,
                 const std::vector<std::size_t>& recv_counts, DataType dtype, void* stream);
  /// Enqueues a reduce-scatter: rank r receives the reduction of slice r (`counts` in rank
  /// order, possibly uneven) in `recv`.
  void reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                     DataType dtype, ReduceOp op, void* stream);
  /// An allreduce whose input is `count` elements of host memory (a joined rank's
  /// identity): copied to a device buffer of its own, reduced, and waited for.
  void allreduce_from_host(const void* host, std::size_t count, DataType dtype, ReduceOp op);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace hvdrun::runtime
