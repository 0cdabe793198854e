// One rank's membership in a job: the rendezvous connection, the check-in with every
// other rank, and the communicators built on top. api.cc holds the single instance.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rendezvous/client.h"
#include "runtime/core/env.h"
#include "runtime/engine/negotiation.h"
#include "runtime/host/host_comm.h"
#include "runtime/nccl/nccl_comm.h"

namespace hvdrun::rendezvous {
class Server;
}  // namespace hvdrun::rendezvous

namespace hvdrun::runtime {

/// Joined job state. Construction performs the whole start-up under the start timeout.
class World {
 public:
  /// Connects, checks in, waits for every rank (naming the missing ones on timeout),
  /// builds the host-memory paths (shared memory inside the host, the leaders' frame mesh
  /// across hosts) and, when possible, NCCL. A standalone environment (a program started without
  /// hvdrun) gets a rendezvous of its own on loopback, so the single rank joins the same
  /// way a rank of `hvdrun -np 1` does. Throws Error.
  explicit World(Environment env);
  ~World();

  /// The environment this rank was started with.
  const Environment& env() const { return env_; }
  /// Barrier through the host's shared segment (and the host leaders' frame mesh), or through
  /// the store when HVDRUN_HOST_PATH=gloo, outside negotiation (for tools that drive the
  /// World directly); on timeout names the ranks that did not arrive.
  void barrier();
  /// One exchange of a negotiation round (an allgather of `bytes` per rank, in rank
  /// order, of which only each rank's first `used` need arrive: Engine::Hooks::exchange)
  /// through the host path: the segment inside a host, the leaders' frame mesh across hosts.
  /// Throws when a peer is lost, naming `head`. Every rank has entered the round when it
  /// returns, so it is also a barrier.
  void exchange(const void* mine, std::size_t used, void* all, std::size_t bytes,
                const Request* head);
  /// Runs a ready collective that this rank, having joined, did not submit: an
  /// allreduce of the op's identity (zeros for Sum and Average), on the device when the
  /// others' tensors are there; nothing for a barrier. Throws when a peer is lost.
  void stand_in(const Ready& ready);
  /// The error of `what` failing because a peer broke (its exception `cause`): rank,
  /// size, host and the likely reason, in the same words wherever it happens.
  Error peer_failure(const std::string& what, const std::exception& cause) const;
  /// Stall reports across hosts: says through the rendezvous that this rank is inside
  /// negotiation round `round`; stall_missing() then lists the ranks that have not said
  /// so. Never throw (a report is best effort).
  void stall_arrived(long long round) noexcept;
  std::vector<int> stall_missing(long long round) noexcept;
  /// Leaves the job: a final barrier (so no rank closes a connection a peer is still
  /// reading from; skipped when `farewell` is false, after a collective failed and the
  /// peers are gone or going), then the communicators are released. Failures are
  /// logged, not thrown. Called by the destructor when not called before.
  void leave(bool farewell = true);
  /// The host-memory communicator.
  HostComm& host() { return *host_; }
  /// The GPU communicator, or nullptr (see nccl_status()).
  NcclComm* nccl() { return nccl_.get(); }
  /// Why there is no NCCL communicator ("" when there is one).
  const std::string& nccl_status() const { return nccl_status_; }
  /// Horovod's is_homogeneous(): every host runs the same number of ranks. Agreed at
  /// check-in (Arrivals), so every rank of the world has the same answer.
  bool homogeneous() const { return homogeneous_; }
  /// Local IP of the rendezvous connection (used for collective traffic); a rank that
  /// checked in through its host's leader has the leader's.
  const std::string& local_address() const { return local_address_; }
  /// Key prefix of this job generation ("hvdrun/g0").
  const std::string& prefix() const { return prefix_; }
  /// A host-memory communicator among the members of a process set (`env`: this rank's
  /// place in it, runtime/world/process_set.h), under `prefix`. Collective among the members.
  std::unique_ptr<HostComm> subset_host(const Environment& env, const std::string& prefix);
  /// A NCCL communicator of `size` ranks in which this rank is `rank`, on this rank's
  /// device. Collective among those ranks.
  std::unique_ptr<NcclComm> subset_nccl(const std::string& key, int rank, int size);

 private:
  // Standalone: starts own_rendezvous_ and points env_ at it.
  void serve_own_rendezvous();
  void check_in(std::chrono::steady_clock::time_point deadline);
  void check_in_host(std::chrono::steady_clock::time_point deadline);
  void await_world(std::chrono::steady_clock::time_point deadline);
  // Adds a party of `ranks` (this rank, or its host) to the arrival counter; the party that
  // completes the world sets the ready key.
  void arrive_in_world(int ranks);
  std::chrono::milliseconds checkin_timeout() const;
  bool has_gpu() const;
  // The rendezvous connection, opened on first use (a rank that checked in through its
  // host's leader may never need one).
  rendezvous::Client& store();
  // Options of a rendezvous connection of this rank; `role` tells connections apart.
  rendezvous::ClientOptions client_options(std::chrono::milliseconds connect,
                                           std::chrono::milliseconds call,
                                           const std::string& role) const;
  void build_nccl(std::chrono::steady_clock::time_point deadline);
  std::string who() const;
  // The barrier behind barrier() and join(): returns the rank that arrived last.
  int arrive(std::chrono::milliseconds timeout);
  // Declared first so it is destroyed last: the rendezvous this World serves itself
  // when it runs standalone (null in a job).
  std::unique_ptr<rendezvous::Server> own_rendezvous_;
  // The stall reports' own connection (the engine's may be busy in a round).
  std::unique_ptr<rendezvous::Client> stall_store_;
  std::mutex stall_mu_;
  // How long leave() waits in its final barrier.
  static constexpr std::chrono::milliseconds kFarewellTimeout{10000};

  Environment env_;
  std::string prefix_;
  // Keys under prefix_.
  rendezvous::Key key(std::string_view part) const { return rendezvous::Key(prefix_) / part; }
  std::unique_ptr<rendezvous::Client> store_;
  std::unique_ptr<HostComm> host_;
  std::unique_ptr<NcclComm> nccl_;
  std::string nccl_status_;
  std::string local_address_;
  long gpus_ = 0;            // ranks of the job that see a GPU, as counted at check-in
  bool homogeneous_ = true;  // as the rank completing the check-in found it
  long long barrier_seq_ = 0;
  bool left_ = false;
};

/// Jobs of at least this many ranks check in through their hosts' leaders by default
/// (HVDRUN_CHECKIN=auto): below it, every rank's own connection costs the server little
/// and a late rank is named by the rendezvous itself.
inline constexpr int kCheckinThroughLeaderFrom = 256;

/// The address this host's leader listens on for the leaders' mesh and Gloo pairs: the
/// first address (of `toward_rendezvous`'s family, else any) of the first interface in
/// `gloo_ifname` (GLOO_SOCKET_IFNAME, else HOROVOD_GLOO_IFACE: a name or a comma-separated
/// list, as the agent sets it to the rank's NIC or the user did) that has one; else
/// `toward_rendezvous`, the address this host reaches the rendezvous from. Null or empty
/// `gloo_ifname`: `toward_rendezvous`.
std::string mesh_address(const std::string& toward_rendezvous, const char* gloo_ifname);

/// True when this rank checks in through its host's leader: HVDRUN_CHECKIN=host, or auto
/// in a job of kCheckinThroughLeaderFrom ranks or more; with the shared-memory host path
/// and more than one local rank.
bool checks_in_through_leader(const Environment& env);

/// Whether this rank's own sizes fit a layout in which every host runs the same number of
/// ranks: size == local_size * cross_size. Every rank of an even layout passes, and in an
/// uneven one local rank 0 of a host with the fewest ranks fails (its cross_size is the number
/// of hosts, and size is more than that many times its local_size), so "no rank fails" is
/// Horovod's is_homogeneous() for the whole world, though one rank's own test alone is not
/// (with hosts of 3, 2 and 1 ranks, local rank 1 of the first passes it).
bool fits_even_layout(const Environment& env);

/// The arrival counter of a check-in (key arrived/<size>), which also carries whether the
/// layout is even, so that the rank completing the world knows it without another round
/// trip and publishes it in the ready key every rank reads. A party checking in (a rank, or
/// a host's leader for its host) adds `of(ranks, fits)`: its ranks, plus kUneven unless
/// its sizes fit an even layout (fits_even_layout(); a leader's are local rank 0's).
class Arrivals {
 public:
  /// Counts the parties whose sizes do not fit; above any number of ranks (kMaxRanks is
  /// 2^20), so at most 2^20 of them still fit an int64.
  static constexpr std::int64_t kUneven = std::int64_t{1} << 32;
  /// What a party of `ranks` ranks adds to the counter.
  static std::int64_t of(int ranks, bool fits) { return ranks + (fits ? 0 : kUneven); }
  /// The counter's value after an add.
  explicit Arrivals(std::int64_t value) : value_(value) {}
  /// Ranks checked in so far.
  int ranks() const { return static_cast<int>(value_ % kUneven); }
  /// No party so far found its sizes off an even layout (the world's answer once
  /// ranks() is its size).
  bool even() const { return value_ < kUneven; }

 private:
  std::int64_t value_;
};

/// Comma-separated rank list, abbreviated past 32 entries.
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace hvdrun::runtime
