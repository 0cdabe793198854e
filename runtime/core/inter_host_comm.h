// The interface of a communicator between processes over TCP: the host leaders' mesh
// across hosts (FrameComm, runtime/frames/frame_comm.h) and Gloo among all ranks
// (GlooComm, runtime/gloo/gloo_comm.h; HVDRUN_HOST_PATH=gloo) both implement it, so the host path
// (runtime/host/host_comm.cc) holds either through one type.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

/// Largest message (bytes) reduced with halving-doubling over a full mesh; larger ones go
/// around a ring (both transports). Above kFullMeshMaxRanks ranks Gloo uses only the ring.
inline constexpr std::size_t kSmallAllreduceBytes = 64 * 1024;
/// Largest world for which Gloo's small allreduces connect a full mesh.
inline constexpr int kFullMeshMaxRanks = 32;

/// Which pairs an algorithm needs; every rank passes the same shape for the same call.
enum class Topology { kRing, kStar, kFullMesh };

/// A communicator over ranks [0, size). Collective calls must be made by every rank in the
/// same order with the same arguments (as with MPI); each throws hvdrun::Error naming the
/// peer when it fails, and the communicator stays failed after that.
class InterHostComm {
 public:
  InterHostComm() = default;
  virtual ~InterHostComm() = default;
  InterHostComm(const InterHostComm&) = delete;
  InterHostComm& operator=(const InterHostComm&) = delete;

  /// In-place allreduce of `count` elements at `buf`.
  virtual void allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) = 0;
  /// Broadcast of `bytes` bytes at `buf` from `root`.
  virtual void broadcast(void* buf, std::size_t bytes, int root) = 0;
  /// Allgather of `bytes` bytes per rank into `recv` (size * bytes), in rank order.
  virtual void allgather(const void* send, void* recv, std::size_t bytes) = 0;
  /// Alltoallv in bytes: `send` holds send_bytes[j] bytes for each rank j in rank order;
  /// `recv` receives recv_bytes[i] bytes from each rank i in rank order.
  virtual void alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                         const std::vector<std::size_t>& recv_bytes) = 0;
  /// Connects every pair an algorithm of this shape needs (collective); the collectives
  /// connect what they need themselves, so this only moves the cost ahead of them.
  virtual void connect(Topology topology, int root) = 0;
  /// A store key under which a failing rank publishes why; while it is set, waits for
  /// peers in the store end early, with that reason, once it appears.
  virtual void set_failure_key(std::string key) = 0;
  /// Number of pairs this rank has connected so far.
  virtual int connected_pairs() const = 0;
};

}  // namespace hvdrun::runtime
