// Host-memory collectives of one rank, whichever way they travel: through the host's
// shared segment (runtime/shm/shm_comm.h) inside a host, through the authenticated frame mesh
// (runtime/frames/frame_comm.h) among one leader per host (local rank 0) across hosts, or, when
// HVDRUN_HOST_PATH=gloo, through Gloo among all ranks as before the segment existed. A
// single-host job opens no TCP connection between its ranks; a job of H hosts builds a
// frame mesh of H leaders.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "rendezvous/store.h"
#include "runtime/core/env.h"
#include "runtime/gloo/gloo_comm.h"
#include "runtime/shm/shm_comm.h"

namespace hvdrun::runtime {

/// The host-memory communicator of a rank; every rank makes the same calls in the same
/// order (the engine guarantees it).
class HostComm {
 public:
  /// Builds the paths `env` calls for (HVDRUN_HOST_PATH: auto, shm or gloo); `prefix` is
  /// the job generation's key prefix, `local_ip` the address Gloo binds. With
  /// `host_checkin` (the host's ranks check in through its leader, runtime/world/world.cc) the
  /// segment's socket is named from the job secret, `store` may be null on ranks other
  /// than local rank 0, and the leaders' part across hosts waits for join_hosts().
  /// Throws Error.
  HostComm(rendezvous::Store* store, const std::string& prefix, const Environment& env,
           const std::string& local_ip, std::chrono::steady_clock::time_point deadline,
           bool host_checkin = false);
  ~HostComm();
  HostComm(const HostComm&) = delete;
  HostComm& operator=(const HostComm&) = delete;

  /// allreduce of `count` elements from `send` into `recv` (in place when equal).
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
  /// allreduce() whose first step also carries `notes` (ShmComm::allreduce_agreed), only
  /// where moves_used_bytes(): returns false, `recv` untouched, when the ranks do not agree.
  bool allreduce_agreed(const void* send, void* recv, std::size_t count, DataType dtype,
                        ReduceOp op, const ShmComm::Notes& notes);
  /// Broadcast of `bytes` bytes of `buf` from global rank `root`.
  void broadcast(void* buf, std::size_t bytes, int root);
  /// Allgather of `bytes` bytes per rank into `recv` (size * bytes), in rank order.
  void allgather(const void* send, void* recv, std::size_t bytes);
  /// allgather() of blocks of which only the first `used` bytes (each rank's own) carry
  /// anything: inside one host, for blocks up to ShmComm::note_bytes() (a round's), only
  /// those cross the segment and the rest of each block in `recv` is left as it was;
  /// larger blocks, and blocks across hosts, move whole.
  void allgather_upto(const void* send, std::size_t used, void* recv, std::size_t bytes);
  /// Alltoallv in bytes: matrix[i * size + j] bytes go from rank i to rank j (the same
  /// matrix on every rank). `send` holds this rank's blocks in destination rank order,
  /// `recv` receives its blocks in source rank order; they must not overlap.
  void alltoallv(const void* send, void* recv, const std::vector<std::size_t>& matrix);
  /// Reduce-scatter of `counts` total elements (per rank, in rank order: the slices):
  /// this rank receives the reduction of its slice in `recv`; Average divides by size.
  void reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                     DataType dtype, ReduceOp op);
  /// The leaders' rank lists and frame mesh across hosts (local rank 0 only; once).
  void join_hosts(std::chrono::steady_clock::time_point deadline);
  /// The host's shared segment, or nullptr (one local rank, or the Gloo path).
  ShmComm* shm();
  /// True when allgather_upto() moves only each rank's used bytes (every rank on this host,
  /// in rank order, over shared memory); the same on every rank.
  bool moves_used_bytes() const;
  /// True when barrier() runs here (the shared-memory paths); otherwise the World's
  /// store barrier is the barrier.
  bool has_barrier() const;
  /// Returns once every rank has entered it (only when has_barrier()).
  void barrier();
  /// Leaving: the leaders' final barrier through the store when they have mesh
  /// connections (so none closes a socket another still reads). Throws on timeout.
  void farewell(std::chrono::milliseconds timeout);
  /// Number of Gloo pairs connected among all ranks (HVDRUN_HOST_PATH=gloo only; the
  /// World then passes a final barrier before leaving).
  int world_gloo_pairs() const;
  /// The Gloo communicator over all ranks (HVDRUN_HOST_PATH=gloo), or nullptr.
  GlooComm* world_gloo();
  /// "shared memory among 4 local ranks + authenticated frames among 3 host leaders"
  /// (the frames part only across hosts), or "Gloo among all 8 ranks", for logs.
  std::string describe() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::runtime
