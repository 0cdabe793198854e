// The intra-host communicator: the ranks of one host share one memory segment and run
// allreduce, broadcast, allgather and barrier through it, without sockets between them.
//
// The segment is a memfd that local rank 0 creates (mode 0600, size sealed) and hands to
// the other local ranks over an abstract Unix socket whose name is random and published
// only through the authenticated rendezvous store; both ends check the peer's uid
// (SO_PEERCRED) before anything passes. A memfd has no name in /dev/shm, so nothing is
// left behind however the job ends: the kernel frees it when the last rank's mapping
// goes, crash or not. The socket is closed as soon as every local rank has the segment.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "hvdrun/hvdrun.h"
#include "rendezvous/store.h"

namespace hvdrun::runtime {

/// Where a local rank stands in its host's segment.
struct ShmMember {
  int local_rank = 0;   ///< index among the ranks of this host
  int local_size = 1;   ///< ranks on this host
  int global_rank = 0;  ///< HVDRUN_RANK, for messages
  int global_size = 1;  ///< HVDRUN_SIZE, for messages
  std::string host;     ///< HVDRUN_HOSTNAME, for messages
};

/// Collectives among the local ranks of one host through a shared segment. Every local
/// rank must make the same calls in the same order (the engine guarantees it). A peer
/// that dies makes the others fail within about 100 ms naming it; one that stops is
/// named when the wait reaches HVDRUN_OP_TIMEOUT; after any failure the segment is
/// marked failed and every later call of every local rank fails at once.
class ShmComm {
 public:
  /// Builds or joins the segment: local rank 0 creates it and publishes the socket name
  /// under `key` in `store`; the others read it there and fetch the memfd. Without a
  /// store (`store` null) `key` is the socket's name itself, which the caller derives
  /// from the job secret (shm_segment.h, shm_socket_name), and the others retry until it is bound.
  /// Throws Error when that does not complete by `deadline`.
  ShmComm(rendezvous::Store* store, const std::string& key, ShmMember me,
          std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds op_timeout);
  ~ShmComm();
  ShmComm(const ShmComm&) = delete;
  ShmComm& operator=(const ShmComm&) = delete;

  /// Reduces `count` elements of `send` into `recv` (send == recv: in place) across the
  /// local ranks; kAverage divides by `divisor` (the local size when 0).
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 int divisor = 0);
  /// Small blocks that ride in a collective's first step: each local rank's `note` (the first
  /// `used` bytes of a block of `bytes`, at most note_bytes()) reaches every rank's `notes`
  /// (rank order, `bytes` apart) as allgather_upto() would move it, in the same step and the
  /// same place, so a rank that runs allgather_upto() there meets them. `agreed`, called once
  /// they are in, must give every local rank the same answer from the notes alone: whether
  /// the collective goes on.
  struct Notes {
    const void* note = nullptr;
    std::size_t used = 0;
    void* notes = nullptr;
    std::size_t bytes = 0;
    const std::function<bool()>* agreed = nullptr;
  };
  /// allreduce() whose first step also exchanges `notes`: no step of its own for them.
  /// Returns false when `notes.agreed` says no: `recv` untouched, nothing reduced (that step's
  /// inputs are left in the segment, which the next step overwrites); true once the result
  /// is in `recv`.
  bool allreduce_agreed(const void* send, void* recv, std::size_t count, DataType dtype,
                        ReduceOp op, int divisor, const Notes& notes);
  /// Most bytes of a note (Notes::bytes): allgather_upto() of blocks this size or smaller takes
  /// one step through the notes' place.
  static std::size_t note_bytes();
  /// Copies `bytes` bytes of `buf` from local rank `root` to every local rank.
  void broadcast(void* buf, std::size_t bytes, int root);
  /// Gathers `bytes` bytes from each local rank, in local rank order, into `recv`.
  void allgather(const void* send, void* recv, std::size_t bytes);
  /// allgather() of `bytes`-byte blocks of which only the first `used` (each rank's own,
  /// at most `bytes`) carry anything. Blocks up to note_bytes() move as notes (Notes): only
  /// the used bytes cross the segment, in one step, and the rest of each block in `recv` is
  /// left as it was. Larger blocks move whole, as allgather() moves them.
  void allgather_upto(const void* send, std::size_t used, void* recv, std::size_t bytes);
  /// Returns once every local rank has entered it.
  void barrier();
  /// The building block of the exchanges in runtime/shm/shm_exchange.h: `phases` steps that
  /// every local rank runs in step. In step i each rank fills its own slot of
  /// chunk_bytes() through `write(i, slot)`; once every rank has written step i, `read(i,
  /// region)` sees every rank's slot of that step (local rank l's at region + l *
  /// chunk_bytes()). Reads of step i overlap the writes of step i + 1.
  void phases(std::size_t phases, const std::function<void(std::size_t, char*)>& write,
              const std::function<void(std::size_t, const char*)>& read);
  /// Start-up exchange, waiting until `deadline` (not HVDRUN_OP_TIMEOUT): gathers
  /// `bytes` (at most chunk_bytes()) from every local rank into `recv` in local rank
  /// order, then hands local rank 0's `bytes` of `reply` to every local rank, after
  /// `between` has run on local rank 0 (which may fill `reply` from what was gathered).
  /// When `between` throws, the segment is marked failed with its message, so the others
  /// fail at once with it; they wait 2 s past `deadline` for that before naming rank 0.
  void gather_then_reply(const void* send, void* recv, void* reply, std::size_t bytes,
                         std::chrono::steady_clock::time_point deadline,
                         const std::function<void()>& between);
  /// Process id of local rank `local` (as it recorded itself in the segment).
  int pid_of(int local) const;
  /// Marks the segment failed with `why`, so local peers waiting in it (now or later)
  /// fail at once instead of at the timeout. Never throws.
  void abort(const std::string& why) noexcept;
  /// The global rank of local rank `local`.
  int global_rank(int local) const;
  /// Bytes each rank moves per pipeline step (the same on every local rank).
  std::size_t chunk_bytes() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::runtime
