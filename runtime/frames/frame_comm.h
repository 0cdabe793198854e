// The host leaders' communicator across hosts: a TCP mesh of its own whose every frame is
// authenticated. Gloo's TCP pairs carry no MAC after they connect and offer no hook on
// their sockets, so data between hosts travels here instead.
//
// Each pair proves the job secret when it connects (the dialling rank answers a nonce the
// listening rank published in the store; the listener answers back), and both ends derive
// one GMAC key per direction from the secret and both nonces. Every frame (a header with
// its length, the payload, a 16-byte tag) is MAC'd under that key with its sequence number
// in the pair and direction as the IV: a frame injected, replayed, reordered, cut short or
// changed fails its tag, and the collective it belongs to ends with an error naming the
// peer. A received frame waits in a buffer of the mesh's own until its tag checks, and
// only then is copied into the caller's buffer or reduced into it: no byte of a rejected
// frame, or of one cut short, reaches memory the caller reads.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "rendezvous/store.h"
#include "runtime/core/inter_host_comm.h"

namespace hvdrun::runtime {

/// Largest payload of one frame; messages are cut into frames of this size.
inline constexpr std::size_t kFrameBytes = 256 * 1024;

/// An authenticated communicator over ranks [0, size); the same collectives and calling
/// rules as GlooComm (every rank makes the same calls in the same order).
class FrameComm final : public InterHostComm {
 public:
  /// As GlooComm's: `secret` keys the handshakes and the frames' MACs; `op_timeout`
  /// bounds each collective, `connect_timeout` the connection of the mesh.
  FrameComm(rendezvous::Store& store, std::string prefix, int rank, int size,
            const std::string& local_ip, const std::string& secret,
            std::chrono::milliseconds op_timeout, std::chrono::milliseconds connect_timeout);
  ~FrameComm() override;
  FrameComm(const FrameComm&) = delete;
  FrameComm& operator=(const FrameComm&) = delete;

  /// In-place allreduce of `count` elements at `buf`: recursive doubling up to
  /// kSmallAllreduceBytes (runtime/core/inter_host_comm.h), a ring above.
  void allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) override;
  /// Broadcast of `bytes` bytes at `buf` from `root`.
  void broadcast(void* buf, std::size_t bytes, int root) override;
  /// Allgather of `bytes` bytes per rank into `recv` (size * bytes), in rank order.
  void allgather(const void* send, void* recv, std::size_t bytes) override;
  /// Alltoallv in bytes, as GlooComm::alltoallv.
  void alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                 const std::vector<std::size_t>& recv_bytes) override;
  /// Connects the pairs a collective of this shape needs (collective). The collectives
  /// connect on demand: a pair is opened by the first collective that needs it (ring
  /// neighbours for allreduce and allgather, the binomial tree from the root for
  /// broadcast, every pair for alltoallv), so a job that never runs an alltoallv never
  /// opens the whole mesh.
  void connect(Topology topology, int root) override;
  /// As GlooComm::set_failure_key.
  void set_failure_key(std::string key) override;
  /// Number of pairs connected so far.
  int connected_pairs() const override;
  /// The connected socket to `peer`, or -1 (tests write into it to check rejection).
  int socket_for_testing(int peer) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::runtime
