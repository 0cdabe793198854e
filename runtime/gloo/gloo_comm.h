// The CPU communicator: Gloo's TCP transport, with pairs connected on demand through the
// rendezvous store. A pair (i, j) is created only when an algorithm needs it; each rank
// publishes the address of its end for that one peer and reads only the address the
// peer published for it, so no rank ever reads the N^2 address table. Both ends of a pair
// prove the job secret over it before it carries data (its frames carry no MAC after
// that: docs/security.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "rendezvous/store.h"
#include "runtime/core/inter_host_comm.h"

namespace hvdrun::runtime {

/// A Gloo communicator over ranks [0, size) (the calling rules of InterHostComm).
class GlooComm final : public InterHostComm {
 public:
  /// `store` is any rendezvous Store (the Client in a job, a MemoryStore in tests);
  /// `prefix` namespaces the store keys (communicator name and generation);
  /// `local_ip` is the address this rank binds for its traffic; `secret` is the job
  /// secret, which both ends of every pair prove before the pair carries data;
  /// `op_timeout` bounds each collective; `connect_timeout` bounds waiting for peers'
  /// addresses.
  GlooComm(rendezvous::Store& store, std::string prefix, int rank, int size,
           const std::string& local_ip, const std::string& secret,
           std::chrono::milliseconds op_timeout, std::chrono::milliseconds connect_timeout);
  ~GlooComm() override;
  GlooComm(const GlooComm&) = delete;
  GlooComm& operator=(const GlooComm&) = delete;

  /// In-place allreduce of `count` elements at `buf`.
  void allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) override;
  /// Broadcast of `bytes` bytes at `buf` from `root`.
  void broadcast(void* buf, std::size_t bytes, int root) override;
  /// Allgather of `bytes` bytes per rank into `recv` (size * bytes).
  void allgather(const void* send, void* recv, std::size_t bytes) override;
  /// Alltoallv in bytes: `send` holds send_bytes[j] bytes for each rank j in rank order;
  /// `recv` receives recv_bytes[i] bytes from each rank i in rank order (pairwise exchange
  /// over the full mesh).
  void alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                 const std::vector<std::size_t>& recv_bytes) override;
  /// Connects every pair an algorithm of this shape needs (collective).
  void connect(Topology topology, int root) override;
  /// A store key under which a failing rank publishes why; while it is set, waits for
  /// peers in the store end early, with that reason, once it appears.
  void set_failure_key(std::string key) override;
  /// Number of pairs this rank has connected so far.
  int connected_pairs() const override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::runtime
