// The state of the host leaders' mesh (runtime/frames/frame_comm.h), shared by its three sources:
// frame_handshake.cc (listening, dialling, accepting, the proofs and the keys),
// frame_transfer.cc (frames, their MACs, and the poll loop that moves every transfer of a
// step at once, so two ranks that both send never wait on each other) and frame_comm.cc
// (the collectives on top). Internal to libhvdrun.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/preauth_gate.h"
#include "rendezvous/gmac.h"
#include "rendezvous/protocol.h"
#include "runtime/frames/frame_comm.h"

namespace hvdrun::runtime {

class FrameComm::Impl {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMacBytes = rendezvous::kMacBytes;

  static constexpr std::array<char, 8> kHelloMagic = {'h', 'v', 'd', 'f', 'r', 'm', '1', '\n'};
  static constexpr std::size_t kNonceBytes = 16;
  // A dialling rank's hello: magic, its rank, the rank it dials, its nonce, its proof.
  static constexpr std::size_t kHelloBytes = kHelloMagic.size() + 4 + 4 + kNonceBytes + kMacBytes;
  static constexpr std::uint32_t kFrameMagic = 0x52465648;  // "HVFR" on the wire
  static constexpr std::size_t kFrameHeaderBytes = 16;      // magic, reserved, payload length
  static constexpr std::size_t kTagBytes = rendezvous::kGmacTagBytes;
  // Steps that send at least this much send on a thread of their own (see run()).
  static constexpr std::size_t kThreadedBytes = 1 << 20;

  static void put32(unsigned char* p, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
  }
  static std::uint32_t get32(const unsigned char* p) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  static void put64(unsigned char* p, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
  }
  static std::uint64_t get64(const unsigned char* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }

  static std::size_t frames_of(std::size_t bytes) {
    return bytes == 0 ? 1 : (bytes + kFrameBytes - 1) / kFrameBytes;
  }

  static int millis_left(Clock::time_point deadline) { return poll_ms_left(deadline); }

  // Writes or reads exactly `n` bytes on a blocking-with-poll socket before `deadline`.
  static void io_exact(int fd, unsigned char* p, std::size_t n, bool out,
                       Clock::time_point deadline, const std::string& what);

  struct Pending {
    UniqueFd fd;
    std::array<unsigned char, kHelloBytes> hello{};
    std::size_t got = 0;
    Clock::time_point deadline;
    std::string source;
    std::shared_ptr<bool> evicted = std::make_shared<bool>(false);  // closed by the gate
  };

  struct Peer {
    UniqueFd fd;
    std::unique_ptr<rendezvous::GmacKey> send_key, recv_key;
    std::uint64_t send_seq = 0, recv_seq = 0;
    // Where a received frame's payload waits until its tag checks (kFrameBytes, allocated
    // at the first receive from this peer); one frame per peer is in flight at a time, and
    // only the receiving thread touches it.
    std::vector<unsigned char> staging;
  };

  // A frame of a message received: its offset in the message, its bytes (valid during the
  // call only) and their number. Called once the frame's tag has checked.
  using OnFrame = std::function<void(std::size_t, const unsigned char*, std::size_t)>;

  // One message to or from one peer, cut into frames. A receiving job's `data` gets each
  // frame's payload once its tag checks; it may be null when `on_frame` consumes them.
  struct Job {
    int peer;
    bool send;
    unsigned char* data;
    std::size_t bytes;
    OnFrame on_frame;
    std::size_t frame = 0;      // frames finished
    std::size_t frame_len = 0;  // payload of the frame in flight
    std::size_t moved = 0;      // bytes of the frame in flight moved so far
    bool started = false;
    std::array<unsigned char, kFrameHeaderBytes> header{};
    std::array<unsigned char, kTagBytes> tag{};
    bool done() const { return frame == frames_of(bytes); }
  };

  Impl(rendezvous::Store& store, std::string prefix, int rank, int size,
       const std::string& local_ip, const std::string& secret, std::chrono::milliseconds op_timeout,
       std::chrono::milliseconds connect_timeout);

  // --- connection (frame_handshake.cc) ---

  std::string addr_key(int r) const { return (rendezvous::Key(prefix_) / "addr" / r).str(); }

  void listen_on(const std::string& local_ip);

  std::string proof(const char* role, int dialer, int acceptor, std::string_view acceptor_nonce,
                    std::string_view dialer_nonce) const;

  // The GMAC key of direction from -> to on the pair (dialer, acceptor).
  std::unique_ptr<rendezvous::GmacKey> frame_key(int from, int to, std::string_view acceptor_nonce,
                                                 std::string_view dialer_nonce) const;

  std::vector<std::string> wait_for(const std::vector<std::string>& keys);

  // Throws, naming the reason, when the failure key (set_failure_key) says that a rank of
  // the job failed first; returns when there is none.
  void check_failure_key();
  [[noreturn]] void failed_first(const std::string& why) const;

  // Connects the pairs to `needed` that are not connected yet (every rank of the call
  // passes its side of the same pairs: a pair is opened by the collective that first needs
  // it, on both of its ends). The higher rank of a pair dials, the lower one accepts, so two
  // ranks never open two connections to each other; a rank dials its lower peers first
  // (in rank order), then accepts its higher ones, so rank 0 only accepts and every chain
  // of dials ends at a rank that is accepting.
  void ensure_peers(const std::vector<int>& needed);

  std::vector<int> all_peers() const;

  void connect_pairs(const std::vector<int>& lower, const std::vector<int>& higher);

  // Dials rank `p` at `value` (its published "host port nonce") and proves the job secret
  // both ways. A connection refused, reset, or closed before the acceptor's proof (its
  // pending cap evicted it; it is not listening yet) is tried again, with jittered
  // exponential backoff, until `deadline` (each retry logged at debug level); a wrong
  // proof from the other end fails at once: that is not rank `p`.
  void dial(int p, const std::string& value, Clock::time_point deadline);

  // One attempt's hello and the check of the acceptor's proof on the connected `fd`; a
  // failure that another attempt might not meet is thrown as frame_handshake.cc's
  // DialRetry, a wrong proof as Error. On success `fd` is the pair's connection.
  void dial_handshake(int p, UniqueFd fd, std::string_view their_nonce, const std::string& at,
                      Clock::time_point deadline);

  // Accepts connections until every rank of `expected` (higher ranks) has dialled and
  // proved the job secret. Another higher rank of this job that dials now (it needs the
  // pair for a later collective) is connected as well; strangers are refused.
  void accept_from(const std::vector<int>& expected, Clock::time_point deadline);

  // Reads what a pending connection sent; true when it completed a valid hello and is now
  // the connection of its rank.
  bool read_hello(PreauthGate& gate, std::map<PendingCap::Id, Pending>& pending, PendingCap::Id id,
                  Clock::time_point deadline);

  // Takes every connection waiting on the listening socket as pending.
  void admit(PreauthGate& gate, std::map<PendingCap::Id, Pending>& pending);

  // Why a complete hello is refused, or "" when it comes from a higher rank of this job.
  std::string check_hello(const std::array<unsigned char, kHelloBytes>& h);

  // --- transfers (frame_transfer.cc) ---

  static std::array<unsigned char, rendezvous::kGmacIvBytes> iv_of(std::uint64_t seq);

  void start_frame(Job& j);

  [[noreturn]] void frame_error(const Job& j, const std::string& what);

  void finish_recv_frame(Job& j);

  // Moves what the socket takes or gives now; returns false when it would block.
  bool step(Job& j);

  // Runs every job to completion: per peer and direction in order, all peers at once.
  // Large steps send on a second thread while this one receives, checks and reduces, so
  // the two directions' copies and MACs overlap as Gloo's event loop overlaps its reads.
  void run(std::vector<Job>& jobs);

  // The jobs of the directions asked for (sends, receives or both), until done, the
  // deadline, or `stop`. A job's peer state of its direction is touched by one thread only.
  void pump(std::vector<Job>& jobs, Clock::time_point deadline, bool sends, bool receives,
            const std::atomic<bool>* stop);

  Job send_job(int peer, const void* data, std::size_t bytes);

  Job recv_job(int peer, void* data, std::size_t bytes, OnFrame on_frame = {});

  // --- collectives (frame_comm.cc) ---

  void allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op);

  // Recursive doubling for small messages (latency: log2(size) exchanges of the whole
  // message, where the ring takes 2 (size - 1) steps). A world that is not a power of two
  // first folds: of ranks 0 .. 2 rem - 1 (rem = size - the largest power of two below it),
  // each even rank hands its data to the odd rank above it and gets the result back at the
  // end. Every combination is computed as (lower group's value) op (higher group's value),
  // the order both partners use, so every rank ends with the same bits (for floats, and
  // for NaN under min and max, whatever the op's own symmetry).
  void allreduce_small(unsigned char* buf, std::size_t count, DataType dtype, ReduceOp op);

  // A binomial tree rooted at `root`: this rank's parent (-1 at the root) and children.
  std::pair<int, std::vector<int>> tree(int root) const;

  // The pairs a collective of `topology` needs on this rank (connect()).
  std::vector<int> peers_of(Topology topology, int root) const;

  // Down a binomial tree: each rank receives the whole message from its parent, then sends
  // it to all its children at once (log2(size) steps; the root sends at most log2(size)
  // copies where a star sent size - 1).
  void broadcast(void* buf, std::size_t bytes, int root);

  void allgather(const void* send, void* recv, std::size_t bytes);

  void alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                 const std::vector<std::size_t>& recv_bytes);

  rendezvous::Store& store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds op_timeout_;
  std::chrono::milliseconds connect_timeout_;
  rendezvous::Hmac hmac_;
  std::string nonce_;
  UniqueFd listener_;
  std::vector<Peer> peers_;
  std::string broken_;
  std::string failure_key_;
  std::vector<unsigned char> scratch_;
};

}  // namespace hvdrun::runtime
