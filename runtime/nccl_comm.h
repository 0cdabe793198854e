// The GPU communicator: NCCL, loaded at run time (dlopen) so libhvdrun works on hosts
// without CUDA. Bootstrap goes through the rendezvous store: rank 0 publishes the
// ncclUniqueId (or why it could not make one) under the communicator's key, the others
// wait for it; init is non-blocking and polled under the start deadline.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "hvdrun/hvdrun.h"
#include "rendezvous/client.h"
#include "runtime/device_watchdog.h"

namespace hvdrun::runtime {

/// Rank 0 runs `make_id` (which may throw) and publishes its result under `key`; every
/// other rank waits up to `timeout` for it. Returns the id bytes on every rank, or throws
/// Error on every rank with rank 0's reason or the timeout. Independent of CUDA, so it
/// is tested without a GPU.
std::string exchange_unique_id(rendezvous::Client& store, const std::string& key, int rank,
                               const std::function<std::string()>& make_id,
                               std::chrono::milliseconds timeout);

/// Number of CUDA devices visible, or -1 with `why` set when CUDA is unusable here.
int cuda_device_count(std::string* why);

/// Name of the network interface that owns `ip`, or "" when none does.
std::string interface_of(const std::string& ip);

/// An NCCL communicator over all ranks.
class NcclComm {
 public:
  /// Builds the communicator: picks device local_rank % devices, exchanges the unique id
  /// under `key`, initialises without blocking and aborts at `deadline`. Throws Error
  /// (fast when there is no GPU or no NCCL; naming the cause when local_size ranks
  /// share fewer GPUs). Then watches every collective (DeviceWatchdog): one that has not
  /// completed `op_timeout` after it was enqueued, or an asynchronous NCCL error, ends
  /// the process with a message.
  NcclComm(rendezvous::Client& store, const std::string& key, int rank, int size, int local_rank,
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

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace hvdrun::runtime
