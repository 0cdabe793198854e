// Shared-memory collectives among the ranks of one host (see shm_comm.h).
//
// Segment: a header page (sizes, the failure mark, the arrival count), one 128-byte
// control line per local rank (its phase counter, pid, global rank and last core), then
// three buffers, each with one slot of `chunk` bytes per local rank.
//
// Every collective is a sequence of phases that all local ranks run in step: do the
// phase's work, publish the phase number in the own control line, wait until every
// local rank has published it. The phase counter runs on across collectives (it is the
// same on every local rank, since every rank makes the same calls), and phase p writes
// only buffer p % 3: what it reads was written in phase p-1 or p-2, and by the time any
// rank writes buffer p % 3 again (phase p+3) every rank has finished phase p+1, the last
// one to read it. So one wait per phase is the only synchronisation, and a collective's
// last reads need no wait of their own: they belong to the next phase's work.
//
// allreduce, large: phase i copies chunk i of the input into the own slot, reduces the
// own part (1/L of chunk i-1) across every slot in place, and copies every rank's reduced
// part of chunk i-2 to the output: a reduce-scatter then an all-gather inside the
// segment, pipelined in chunks so each step works on data still in cache. Small: one
// phase copies the input in, then every rank reduces all slots itself (one wait, not two).
//
// Arrival is counted once per phase in the header (L per phase), so all waiters of a
// phase sleep on one futex word and the rank that completes the count wakes them with
// one call; each rank also keeps its own phase counter, to name late or dead ranks.
// Waits spin first while every awaited rank runs on another core (adaptive, up to 1 ms when
// every local rank has a core, 2 us when they share), yield the core once, then sleep in
// slices of at most 100 ms; between slices they check that every awaited rank's process
// still exists (pidfd), the segment's abort mark, and the deadline (HVDRUN_OP_TIMEOUT).
#include "runtime/shm_comm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "common/fd.h"
#include "common/log.h"
#include "common/log_limiter.h"
#include "common/seconds_text.h"
#include "rendezvous/protocol.h"
#include "runtime/generation_end.h"
#include "runtime/shm_reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvdrun::runtime {

namespace {

// One byte with room for one descriptor as SCM_RIGHTS: what local rank 0 sends each local
// rank, and what that rank receives the segment's memfd into.
struct FdMessage {
  char byte = 'm';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::uint64_t kMagic = 0x6876647275'6e7368ULL;  // "hvdrunsh"
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kLineBytes = 128;  // two cache lines: no false sharing via prefetch
constexpr std::size_t kBuffers = 3;
constexpr std::size_t kDefaultChunk = 256u << 10;
constexpr std::size_t kMaxDataBytes = 96u << 20;
constexpr std::size_t kSmallBytes = 8u << 10;
constexpr milliseconds kSlice{100};

struct Header {
  std::uint64_t magic = kMagic;
  std::uint32_t local_size = 0;
  std::uint32_t reserved = 0;
  std::uint64_t chunk = 0;
  std::uint64_t data_offset = 0;
  std::uint64_t total_bytes = 0;
  // 0 while healthy; global rank + 1 of the first rank that failed in the segment.
  std::atomic<std::uint32_t> abort_rank{0};
  std::atomic<std::uint32_t> abort_ready{0};
  char abort_msg[1024] = {};
  alignas(64) std::atomic<std::uint32_t> arrived{0};  // futex word: L per phase
  std::atomic<std::uint32_t> sleepers{0};             // ranks asleep on `arrived`
};
static_assert(sizeof(Header) <= kHeaderBytes);

struct Line {
  std::atomic<std::uint32_t> phase{0};  // last phase this rank finished
  std::atomic<std::int32_t> pid{0};
  std::atomic<std::int32_t> rank{-1};
  std::atomic<std::int32_t> cpu{-1};  // where the rank last published (a hint)
};
static_assert(sizeof(Line) <= kLineBytes);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The phase counter wraps; ranks are never more than one phase apart.
bool reached(std::uint32_t have, std::uint32_t want) {
  return static_cast<std::int32_t>(have - want) >= 0;
}

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t val, const timespec* ts) {
  // Shared between processes: no FUTEX_PRIVATE_FLAG.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, val, ts, nullptr, 0);
}

int pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

sockaddr_un abstract_address(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // Abstract namespace: a leading NUL, no file, gone with the last descriptor.
  std::memcpy(a.sun_path + 1, name.data(), std::min(name.size(), sizeof(a.sun_path) - 1));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

// Waits until `fd` is readable (or writable) or the deadline passes.
bool poll_until(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw_errno("shared memory: waiting on a local socket", "poll");
  }
}

uid_t peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    throw_errno("shared memory: checking the local peer", "getsockopt(SO_PEERCRED)");
  return cred.uid;
}

int online_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace

class ShmComm::Impl {
 public:
  Impl(rendezvous::Store* store, const std::string& key, ShmMember me, Clock::time_point deadline,
       milliseconds op_timeout)
      : me_(std::move(me)), L_(me_.local_size), op_timeout_(op_timeout) {
    who_ = "rank " + std::to_string(me_.global_rank) + " of " + std::to_string(me_.global_size) +
           " on " + me_.host;
    // Spinning only pays while the awaited ranks run on other cores. So a wait does not
    // spin at all while one of them was last seen on this core (it cannot run while this
    // one spins; measured on 2 busy cores, both ranks of np 2 on one core: each 8-byte allreduce
    // cost the spin time plus 14 us), spins up to max_spin_ otherwise, and halves its
    // budget (down to min_spin_) after a wait the spin did not cover (the peer descheduled by
    // another program), doubling it again after one it did. When ranks outnumber cores, spinning
    // takes a core some rank needs, so waits sleep after 2 us: a futex wake-up hands the
    // core over, where sched_yield on a busy host mostly hands it to another program
    // (measured: 30 us per 8-byte allreduce at np 4 on 2 cores with the futex, 150-1400
    // us with 100 us of yielding first).
    const bool own_cores = online_cpus() >= L_;
    max_spin_ = own_cores ? std::chrono::microseconds(1000) : std::chrono::microseconds(2);
    // A peer that slept takes 5-20 us to wake; a shorter floor would make both sides
    // miss each other for ever once they both sleep.
    min_spin_ = own_cores ? std::chrono::microseconds(50) : std::chrono::microseconds(2);
    if (const char* v = std::getenv("HVDRUN_SHM_SPIN_US"))
      min_spin_ = max_spin_ = std::chrono::microseconds(std::strtoll(v, nullptr, 10));
    spin_ = max_spin_;
    if (const char* v = std::getenv("HVDRUN_SHM_YIELDS"))
      yields_ = std::max(1, static_cast<int>(std::strtol(v, nullptr, 10)));
    UniqueFd memfd =
        me_.local_rank == 0 ? create(store, key, deadline) : fetch(store, key, deadline);
    map(memfd.get());
    attach(deadline);
    // The generation's end (runtime/generation_end.h) marks the segment failed, which
    // wakes this host's sleeping waiters, those of other processes included.
    end_waker_ = std::make_unique<EndWaker>([this](const std::string& why) { abort(why); });
  }

  ~Impl() {
    end_waker_.reset();  // before the segment it writes to goes
    if (base_ != nullptr) ::munmap(base_, mapped_);
  }

  // --- segment set-up ---

  UniqueFd create(rendezvous::Store* store, const std::string& key, Clock::time_point deadline) {
    std::size_t chunk = kDefaultChunk;
    if (const char* v = std::getenv("HVDRUN_SHM_CHUNK_BYTES"))
      chunk = std::max<std::size_t>(4096, std::strtoull(v, nullptr, 10));
    const std::size_t per_buffer_cap = kMaxDataBytes / kBuffers / static_cast<std::size_t>(L_);
    chunk = std::max<std::size_t>(4096, std::min(chunk, per_buffer_cap)) / 4096 * 4096;
    const std::size_t data_offset =
        round_up(kHeaderBytes + kLineBytes * static_cast<std::size_t>(L_), 4096);
    const std::size_t total = data_offset + kBuffers * static_cast<std::size_t>(L_) * chunk;

    UniqueFd fd(static_cast<int>(::memfd_create("hvdrun-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
    if (!fd) throw_errno("shared memory: " + who_ + ": creating the segment", "memfd_create");
    if (::fchmod(fd.get(), 0600) != 0) throw_errno("shared memory: " + who_, "fchmod");
    if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0)
      throw_errno(
          "shared memory: " + who_ + ": sizing the segment to " + std::to_string(total) + " bytes",
          "ftruncate");
    // No rank can shrink it under the others (which would be SIGBUS), or grow it.
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
      throw_errno("shared memory: " + who_, "fcntl(F_ADD_SEALS)");
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) throw_errno("shared memory: " + who_ + ": mapping the segment", "mmap");
    auto* h = new (p) Header;
    h->local_size = static_cast<std::uint32_t>(L_);
    h->chunk = chunk;
    h->data_offset = data_offset;
    h->total_bytes = total;
    for (int l = 0; l < L_; ++l)
      new (static_cast<char*>(p) + kHeaderBytes + kLineBytes * static_cast<std::size_t>(l)) Line;
    ::munmap(p, total);
    if (L_ > 1) hand_out(fd, store, key, deadline);
    return fd;
  }

  // Hands the memfd to the other local ranks. The socket's name is random and travels
  // only through the authenticated store, or (without a store) is `key`, derived from
  // the job secret; both ends check the other's uid.
  void hand_out(const UniqueFd& fd, rendezvous::Store* store, const std::string& key,
                Clock::time_point deadline) {
    const std::string name = store ? "hvdrun-" + hex(rendezvous::random_bytes(16)) : key;
    UniqueFd srv(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!srv) throw_errno("shared memory: " + who_, "socket(AF_UNIX)");
    socklen_t len = 0;
    auto addr = abstract_address(name, &len);
    const bool bound = ::bind(srv.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0;
    if (!bound && !store && errno == EADDRINUSE)
      throw Error("shared memory: " + who_ + ": another process of this job already holds " +
                  me_.host +
                  "'s segment socket: two processes were started as local rank 0 "
                  "(HVDRUN_LOCAL_RANK=0) of this host");
    if (!bound || ::listen(srv.get(), L_) != 0)
      throw_errno("shared memory: " + who_ + ": local socket @" + name, "bind/listen");
    if (store) store->set(key, name);
    int handed = 0;
    // Another user sees the socket's name in /proc/net/unix and may connect as often as it
    // likes: the first refusal is written, then one line per 10 s with a count.
    LogLimiter refusals(std::chrono::seconds(10), &hvdrun::log());
    const std::string socket_name = "hvdrun: " + who_ + ": the segment socket";
    // Global rank of each local rank that fetched the segment, -1 while it has not.
    std::vector<int> came(static_cast<std::size_t>(L_), -1);
    came[0] = me_.global_rank;
    while (handed < L_ - 1) {
      if (!poll_until(srv.get(), POLLIN, deadline)) {
        std::string absent;
        for (int l = 1; l < L_; ++l)
          if (came[static_cast<std::size_t>(l)] < 0)
            absent += (absent.empty() ? "" : ", ") + std::to_string(rank_of(l));
        refusals.flush(socket_name);
        throw Error("shared memory: " + who_ + ": local rank(s) " + absent +
                    " did not fetch the segment before the start timeout (" +
                    std::to_string(handed) + " of " + std::to_string(L_ - 1) +
                    " other local ranks did)");
      }
      UniqueFd c(::accept4(srv.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c) continue;
      if (const uid_t uid = peer_uid(c.get()); uid != ::geteuid()) {
        refusals.warn("refused uid " + std::to_string(uid),
                      "hvdrun: " + who_ + ": refused a local connection from uid " +
                          std::to_string(uid) + " to the segment socket");
        continue;
      }
      // A local rank says hello at once; anything else (a stray connection from another
      // process of this user) gets a second, not the whole start timeout.
      std::int32_t hello[2] = {-1, -1};
      if (!poll_until(c.get(), POLLIN,
                      std::min(deadline, Clock::now() + std::chrono::seconds(1))) ||
          ::recv(c.get(), hello, sizeof(hello), MSG_WAITALL | MSG_DONTWAIT) !=
              static_cast<ssize_t>(sizeof(hello)))
        continue;
      if (hello[0] <= 0 || hello[0] >= L_) continue;
      auto& first = came[static_cast<std::size_t>(hello[0])];
      if (first >= 0)
        throw Error(
            "shared memory: " + who_ + ": two processes asked for the segment as local rank " +
            std::to_string(hello[0]) + " (ranks " + std::to_string(first) + " and " +
            std::to_string(hello[1]) + "): every rank of a host needs its own HVDRUN_LOCAL_RANK");
      FdMessage m;
      cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      int raw = fd.get();
      std::memcpy(CMSG_DATA(cm), &raw, sizeof(int));
      if (::sendmsg(c.get(), &m.msg, MSG_NOSIGNAL) == 1) {
        first = hello[1];
        ++handed;
      }
    }
    refusals.flush(socket_name);
  }

  // Why local rank 0 may never serve this rank (only without a store, where its socket's
  // name is fixed and a second process of one local rank finds it too).
  std::string not_served() const {
    return "local rank 0 did not start, or it had already handed the segment to every "
           "local rank and this process is a second one with HVDRUN_LOCAL_RANK=" +
           std::to_string(me_.local_rank);
  }

  std::string waiting_for_leader() const {
    return "shared memory: " + who_ + ": waiting for local rank 0 (rank " +
           std::to_string(me_.global_rank - me_.local_rank) + ") to create the segment";
  }

  // Connects to local rank 0's socket: the name from the store, or (no store) `key`
  // itself, retried until local rank 0 has bound it or the deadline passes.
  UniqueFd connect_leader(rendezvous::Store* store, const std::string& key,
                          Clock::time_point deadline) {
    std::optional<std::string> name = key;
    if (store) {
      store->wait({key}, time_left(deadline), waiting_for_leader());
      name = store->get(key);
      if (!name) throw Error("shared memory: " + who_ + ": the segment's socket name vanished");
    }
    auto pause = std::chrono::microseconds(500);
    for (;;) {
      UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!c) throw_errno("shared memory: " + who_, "socket(AF_UNIX)");
      socklen_t len = 0;
      auto addr = abstract_address(*name, &len);
      if (::connect(c.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) return c;
      const int err = errno;
      // Not bound yet (only without a store can this rank be early), or its backlog full.
      if (!store && (err == ECONNREFUSED || err == EAGAIN) && Clock::now() < deadline) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(50000));
        continue;
      }
      if (!store && err == ECONNREFUSED)
        throw Error(waiting_for_leader() + ": its socket did not accept within the start " +
                    "timeout (" + not_served() + ")");
      throw_errno("shared memory: " + who_ + ": connecting to local rank 0's socket @" + *name +
                      " (are all ranks of host " + me_.host + " in one network namespace?)",
                  "connect");
    }
  }

  UniqueFd fetch(rendezvous::Store* store, const std::string& key, Clock::time_point deadline) {
    UniqueFd c = connect_leader(store, key, deadline);
    const std::string name = store ? "local rank 0's socket" : "@" + key;
    if (peer_uid(c.get()) != ::geteuid())
      throw Error("shared memory: " + who_ + ": the process behind " + name +
                  " belongs to another user; refusing its segment");
    // Without a store, a connection local rank 0 closes unserved (this rank reached its
    // backlog as it finished handing out) is a second process of one local rank: the
    // close shows at the send or at the receive, whichever comes after it.
    const auto closed_unserved = [&] {
      return Error("shared memory: " + who_ + ": local rank 0 closed its socket without " +
                   "handing over the segment (" + not_served() + ")");
    };
    std::int32_t hello[2] = {me_.local_rank, me_.global_rank};
    if (::send(c.get(), hello, sizeof(hello), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sizeof(hello))) {
      if (!store && (errno == EPIPE || errno == ECONNRESET)) throw closed_unserved();
      throw_errno("shared memory: " + who_ + ": asking local rank 0 for the segment", "send");
    }
    if (!poll_until(c.get(), POLLIN, deadline))
      throw Error("shared memory: " + who_ +
                  ": local rank 0 did not hand over the segment before the start timeout");
    FdMessage m;
    const auto got = ::recvmsg(c.get(), &m.msg, MSG_CMSG_CLOEXEC);
    if (got != 1 && !store) throw closed_unserved();
    if (got != 1) throw_errno("shared memory: " + who_ + ": receiving the segment", "recvmsg");
    cmsghdr* cm = CMSG_FIRSTHDR(&m.msg);
    if (cm == nullptr || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
      throw Error("shared memory: " + who_ + ": local rank 0 sent no segment");
    int raw = -1;
    std::memcpy(&raw, CMSG_DATA(cm), sizeof(int));
    return UniqueFd(raw);
  }

  void map(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw_errno("shared memory: " + who_, "fstat");
    mapped_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw_errno("shared memory: " + who_ + ": mapping the segment", "mmap");
    base_ = static_cast<char*>(p);
    header_ = std::launder(reinterpret_cast<Header*>(base_));
    if (mapped_ < kHeaderBytes || header_->magic != kMagic ||
        header_->local_size != static_cast<std::uint32_t>(L_) || header_->total_bytes != mapped_)
      throw Error("shared memory: " + who_ + ": the segment is not what local rank 0 (" +
                  std::to_string(header_->local_size) + " local ranks) and this rank (" +
                  std::to_string(L_) + ") agree on; HVDRUN_LOCAL_SIZE differs between them?");
    chunk_ = header_->chunk;
    data_ = base_ + header_->data_offset;
  }

  Line& line(int l) const {
    return *std::launder(
        reinterpret_cast<Line*>(base_ + kHeaderBytes + kLineBytes * static_cast<std::size_t>(l)));
  }

  // Every local rank records who it is, then all wait for each other once (under the
  // start deadline) and take a pidfd of every peer to notice its death later.
  void attach(Clock::time_point deadline) {
    auto& mine = line(me_.local_rank);
    mine.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
    mine.rank.store(me_.global_rank, std::memory_order_relaxed);
    ranks_.assign(static_cast<std::size_t>(L_), -1);
    pidfds_.resize(static_cast<std::size_t>(L_));
    pids_.assign(static_cast<std::size_t>(L_), 0);
    sync(deadline, "attach");
    for (int l = 0; l < L_; ++l) {
      ranks_[static_cast<std::size_t>(l)] = line(l).rank.load(std::memory_order_relaxed);
      pids_[static_cast<std::size_t>(l)] = line(l).pid.load(std::memory_order_relaxed);
      // Local rank 0 watches every peer through a pidfd, the others watch local rank 0
      // (and the rest by kill(pid, 0), which sees a peer once it is reaped): L - 1 + L - 1
      // descriptors per host instead of L * (L - 1), 261,632 at 512 local ranks. A death
      // is still seen at once: local rank 0 waits in the same phase and marks the segment
      // failed, which wakes everyone with its message.
      if (l != me_.local_rank && (me_.local_rank == 0 || l == 0))
        pidfds_[static_cast<std::size_t>(l)] =
            UniqueFd(pidfd_open(pids_[static_cast<std::size_t>(l)]));
    }
  }

  // --- waiting ---

  // Arrival: the own phase counter (read when naming late or dead ranks) and the
  // segment's arrival count, on which every waiter of the phase sleeps; the rank that
  // completes the count wakes them all, so a phase costs each rank at most one sleep
  // and the whole host one wake-up call.
  void publish() {
    auto& mine = line(me_.local_rank);
    ++phase_;
    mine.cpu.store(::sched_getcpu(), std::memory_order_relaxed);
    mine.phase.store(phase_, std::memory_order_release);
    const std::uint32_t target = phase_ * static_cast<std::uint32_t>(L_);
    const std::uint32_t now = header_->arrived.fetch_add(1, std::memory_order_seq_cst) + 1;
    if (now == target && header_->sleepers.load(std::memory_order_seq_cst) != 0)
      futex(&header_->arrived, FUTEX_WAKE, INT_MAX, nullptr);
  }

  void sync(Clock::time_point deadline, const char* what = nullptr) {
    publish();
    wait_all(deadline, what);
  }

  bool alive(int l) const {
    const auto& fd = pidfds_[static_cast<std::size_t>(l)];
    if (fd) {
      pollfd p{fd.get(), POLLIN, 0};
      return ::poll(&p, 1, 0) == 0;  // readable once the process has exited
    }
    const pid_t pid = pids_.empty() ? 0 : pids_[static_cast<std::size_t>(l)];
    return pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH;
  }

  [[noreturn]] void fail(const std::string& why) {
    abort(why);
    throw std::runtime_error(why);
  }

  [[noreturn]] void failed_elsewhere() {
    const auto r = header_->abort_rank.load(std::memory_order_acquire);
    std::string msg;
    for (int i = 0; i < 1000 && header_->abort_ready.load(std::memory_order_acquire) == 0; ++i)
      std::this_thread::yield();
    if (header_->abort_ready.load(std::memory_order_acquire) != 0)
      msg =
          std::string(header_->abort_msg, strnlen(header_->abort_msg, sizeof(header_->abort_msg)));
    throw std::runtime_error("shared memory on " + me_.host + ": rank " + std::to_string(r - 1) +
                             " failed first" + (msg.empty() ? "" : ": " + msg));
  }

  bool all_arrived() const {
    return reached(header_->arrived.load(std::memory_order_acquire),
                   phase_ * static_cast<std::uint32_t>(L_));
  }

  // Whether every rank that has not yet arrived was last seen on another core, where it
  // can run while this rank spins. One that was last seen on this core most likely waits
  // for it: spinning would only keep it waiting.
  bool awaited_elsewhere() const {
    const int here = ::sched_getcpu();
    bool any = false;
    for (int l = 0; l < L_; ++l) {
      const auto& ln = line(l);
      if (l == me_.local_rank || reached(ln.phase.load(std::memory_order_relaxed), phase_))
        continue;
      if (ln.cpu.load(std::memory_order_relaxed) == here) return false;
      any = true;
    }
    return any;
  }

  void wait_all(Clock::time_point deadline, const char* what) {
    if (all_arrived()) return;
    if (spin_.count() > 0 && awaited_elsewhere()) {
      const auto spin_until = Clock::now() + spin_;
      for (unsigned i = 1;; ++i) {
        if (all_arrived()) {
          spin_ = std::min(max_spin_, spin_ * 2);
          return;
        }
        cpu_relax();
        if ((i & 63) == 0) {
          generation_end().check();
          if (header_->abort_rank.load(std::memory_order_relaxed) != 0) failed_elsewhere();
          if (Clock::now() > spin_until) break;
        }
      }
      spin_ = std::max(min_spin_, spin_ / 2);
    }
    // One yield before sleeping: an awaited rank that is runnable on this core gets it
    // without the futex round trip (measured on 2 busy cores: an 8-byte allreduce at np 2
    // 4.7 -> 1.9 us, at np 4 12 -> 5.6 us; more yields or yielding for longer lost to
    // other programs taking the core).
    for (int i = 0; i < yields_; ++i) {
      ::sched_yield();
      if (all_arrived()) return;
    }
    const std::uint32_t target = phase_ * static_cast<std::uint32_t>(L_);
    for (;;) {
      generation_end().check();
      if (header_->abort_rank.load(std::memory_order_acquire) != 0) failed_elsewhere();
      const auto now = Clock::now();
      if (now >= deadline) timed_out(phase_, what);
      auto slice = std::min<Clock::duration>(deadline - now, kSlice);
      timespec ts{};
      ts.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(slice).count();
      ts.tv_nsec = static_cast<long>((slice - std::chrono::seconds(ts.tv_sec)) /
                                     std::chrono::nanoseconds(1));
      header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = header_->arrived.load(std::memory_order_seq_cst);
      if (!reached(seen, target)) futex(&header_->arrived, FUTEX_WAIT, seen, &ts);
      header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (all_arrived()) return;
      for (int l = 0; l < L_; ++l) {
        if (l == me_.local_rank || reached(line(l).phase.load(std::memory_order_acquire), phase_) ||
            alive(l))
          continue;
        if (reached(line(l).phase.load(std::memory_order_acquire), phase_)) continue;
        // A rank that failed marks the segment before it exits: its reason is the news.
        if (header_->abort_rank.load(std::memory_order_acquire) != 0) failed_elsewhere();
        fail("shared memory on " + me_.host + ": rank(s) " + std::to_string(rank_of(l)) +
             " exited (process " + std::to_string(pids_[static_cast<std::size_t>(l)]) +
             ") while rank " + std::to_string(me_.global_rank) + " waited for it");
      }
    }
  }

  int rank_of(int l) const {
    const int r = ranks_.empty() ? -1 : ranks_[static_cast<std::size_t>(l)];
    return r >= 0 ? r : me_.global_rank - me_.local_rank + l;
  }

  [[noreturn]] void timed_out(std::uint32_t want, const char* what) {
    std::string late;
    for (int l = 0; l < L_; ++l)
      if (!reached(line(l).phase.load(std::memory_order_acquire), want))
        late += (late.empty() ? "" : ", ") + std::to_string(rank_of(l));
    if (what != nullptr)
      throw Error("shared memory: " + who_ + ": local rank(s) " + late + " did not " +
                  (std::string_view(what) == "attach" ? "attach to the segment"
                                                      : "reach " + std::string(what)) +
                  " before the start timeout");
    fail("shared memory on " + me_.host + ": rank(s) " + late + " did not arrive within " +
         seconds_text(op_timeout_) + " s (HVDRUN_OP_TIMEOUT)");
  }

  void abort(const std::string& why) noexcept {
    if (header_ == nullptr) return;
    std::uint32_t none = 0;
    if (header_->abort_rank.compare_exchange_strong(
            none, static_cast<std::uint32_t>(me_.global_rank + 1), std::memory_order_acq_rel)) {
      std::size_t n = std::min(why.size(), sizeof(header_->abort_msg) - 1);
      std::memcpy(header_->abort_msg, why.data(), n);
      header_->abort_msg[n] = '\0';
      header_->abort_ready.store(1, std::memory_order_release);
    }
    futex(&header_->arrived, FUTEX_WAKE, INT_MAX, nullptr);
  }

  void check_healthy() {
    generation_end().check();
    if (header_->abort_rank.load(std::memory_order_acquire) != 0) failed_elsewhere();
  }

  Clock::time_point op_deadline() const { return Clock::now() + op_timeout_; }

  // --- buffers ---

  // Buffer of phase p; slot of local rank l in it.
  char* region(std::uint32_t p) const {
    return data_ + (p % kBuffers) * static_cast<std::size_t>(L_) * chunk_;
  }
  char* slot(std::uint32_t p, int l) const {
    return region(p) + static_cast<std::size_t>(l) * chunk_;
  }

  // --- collectives ---

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 int divisor) {
    const std::size_t es = dtype_size(dtype);
    const std::size_t bytes = count * es;
    if (divisor <= 0) divisor = L_;
    auto* out = static_cast<char*>(recv);
    const auto* in = static_cast<const char*>(send);
    if (L_ == 1 || count == 0) {
      if (send != recv && bytes > 0) std::memmove(recv, send, bytes);
      finish_average(recv, count, dtype, op, divisor);
      return;
    }
    check_healthy();
    const auto deadline = op_deadline();
    if (bytes <= std::min(kSmallBytes, chunk_)) {
      const std::uint32_t p = phase_ + 1;
      std::memcpy(slot(p, me_.local_rank), in, bytes);
      sync(deadline);
      // Every rank reduces every slot, in local rank order: the same result everywhere.
      std::memcpy(out, slot(p, 0), bytes);
      for (int l = 1; l < L_; ++l) reduce_into(out, slot(p, l), count, dtype, op);
      finish_average(out, count, dtype, op, divisor);
      return;
    }
    const std::size_t per_chunk = chunk_ / es;  // elements per rank per phase
    const std::size_t chunks = (count + per_chunk - 1) / per_chunk;
    const std::size_t align = std::max<std::size_t>(1, 64 / es);
    auto chunk_len = [&](std::size_t c) { return std::min(per_chunk, count - c * per_chunk); };
    // Part of local rank l within a chunk of m elements: [first, last).
    auto part = [&](std::size_t m, int l) {
      const std::size_t per = round_up((m + L_ - 1) / L_, align);
      const std::size_t first = std::min(m, per * static_cast<std::size_t>(l));
      return std::pair{first, std::min(m, first + per)};
    };
    auto copy_out = [&](std::size_t c, std::uint32_t p) {
      const std::size_t m = chunk_len(c);
      for (int l = 0; l < L_; ++l) {
        auto [first, last] = part(m, l);
        if (last > first)
          std::memcpy(out + (c * per_chunk + first) * es, slot(p, l) + first * es,
                      (last - first) * es);
      }
    };
    for (std::size_t i = 0; i <= chunks; ++i) {
      const std::uint32_t p = phase_ + 1;
      if (i < chunks)
        std::memcpy(slot(p, me_.local_rank), in + i * per_chunk * es, chunk_len(i) * es);
      if (i >= 1) {
        auto [first, last] = part(chunk_len(i - 1), me_.local_rank);
        if (last > first) {
          char* acc = slot(p - 1, me_.local_rank) + first * es;
          for (int l = 0; l < L_; ++l)
            if (l != me_.local_rank)
              reduce_into(acc, slot(p - 1, l) + first * es, last - first, dtype, op);
          finish_average(acc, last - first, dtype, op, divisor);
        }
      }
      if (i >= 2) copy_out(i - 2, p - 2);
      sync(deadline);
    }
    copy_out(chunks - 1, phase_ - 1);
  }

  void broadcast(void* buf, std::size_t bytes, int root) {
    if (L_ == 1 || bytes == 0) return;
    check_healthy();
    const auto deadline = op_deadline();
    const std::size_t span = chunk_ * static_cast<std::size_t>(L_);
    const std::size_t chunks = (bytes + span - 1) / span;
    auto* b = static_cast<char*>(buf);
    const bool is_root = me_.local_rank == root;
    auto len = [&](std::size_t c) { return std::min(span, bytes - c * span); };
    for (std::size_t i = 0; i < chunks; ++i) {
      const std::uint32_t p = phase_ + 1;
      if (is_root) std::memcpy(region(p), b + i * span, len(i));
      if (!is_root && i >= 1) std::memcpy(b + (i - 1) * span, region(p - 1), len(i - 1));
      sync(deadline);
    }
    if (!is_root) std::memcpy(b + (chunks - 1) * span, region(phase_), len(chunks - 1));
  }

  void allgather(const void* send, void* recv, std::size_t bytes) {
    auto* out = static_cast<char*>(recv);
    const auto* in = static_cast<const char*>(send);
    char* own = out + bytes * static_cast<std::size_t>(me_.local_rank);
    if (L_ == 1 || bytes == 0) {
      if (bytes > 0 && in != own) std::memmove(own, in, bytes);
      return;
    }
    check_healthy();
    const auto deadline = op_deadline();
    const std::size_t chunks = (bytes + chunk_ - 1) / chunk_;
    auto len = [&](std::size_t c) { return std::min(chunk_, bytes - c * chunk_); };
    auto copy_out = [&](std::size_t c, std::uint32_t p) {
      for (int l = 0; l < L_; ++l)
        if (out + bytes * static_cast<std::size_t>(l) + c * chunk_ != in + c * chunk_)
          std::memcpy(out + bytes * static_cast<std::size_t>(l) + c * chunk_, slot(p, l), len(c));
    };
    for (std::size_t i = 0; i < chunks; ++i) {
      const std::uint32_t p = phase_ + 1;
      std::memcpy(slot(p, me_.local_rank), in + i * chunk_, len(i));
      if (i >= 1) copy_out(i - 1, p - 1);
      sync(deadline);
    }
    copy_out(chunks - 1, phase_);
  }

  void phases(std::size_t count, const std::function<void(std::size_t, char*)>& write,
              const std::function<void(std::size_t, const char*)>& read) {
    if (count == 0) return;
    check_healthy();
    const auto deadline = op_deadline();
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t p = phase_ + 1;
      write(i, slot(p, me_.local_rank));
      if (i >= 1) read(i - 1, region(p - 1));
      sync(deadline);
    }
    read(count - 1, region(phase_));
  }

  void barrier() {
    if (L_ == 1) return;
    check_healthy();
    sync(op_deadline());
  }

  void gather_then_reply(const void* send, void* recv, void* reply, std::size_t bytes,
                         Clock::time_point deadline, const std::function<void()>& between) {
    if (bytes > chunk_)
      throw Error("shared memory: " + who_ + ": a start-up exchange of " + std::to_string(bytes) +
                  " bytes does not fit a slot of " + std::to_string(chunk_));
    check_healthy();
    const std::uint32_t p = phase_ + 1;
    std::memcpy(slot(p, me_.local_rank), send, bytes);
    sync(deadline, "the host's check-in");
    if (me_.local_rank == 0) {
      for (int l = 0; l < L_; ++l)
        std::memcpy(static_cast<char*>(recv) + static_cast<std::size_t>(l) * bytes, slot(p, l),
                    bytes);
      try {
        between();
      } catch (const std::exception& e) {
        abort(e.what());  // the others fail at once with this reason, not at the deadline
        throw;
      }
      std::memcpy(slot(p + 1, 0), reply, bytes);
    }
    // Local rank 0's own waits end at `deadline` too and then mark the segment failed
    // with their reason: the others give it that long to say why before naming it.
    sync(me_.local_rank == 0 ? deadline : deadline + std::chrono::seconds(2),
         "the host's check-in");
    if (me_.local_rank != 0) std::memcpy(reply, slot(p + 1, 0), bytes);
  }

  int pid_of(int l) const { return pids_[static_cast<std::size_t>(l)]; }

  ShmMember me_;
  int L_;
  milliseconds op_timeout_;
  std::string who_;
  std::chrono::microseconds min_spin_{0};
  std::chrono::microseconds max_spin_{0};
  std::chrono::microseconds spin_{0};  // the current budget, in [min_spin_, max_spin_]
  int yields_ = 1;                     // sched_yield calls before a wait sleeps
  char* base_ = nullptr;
  std::size_t mapped_ = 0;
  Header* header_ = nullptr;
  char* data_ = nullptr;
  std::size_t chunk_ = 0;
  std::uint32_t phase_ = 0;
  std::vector<int> ranks_;
  std::vector<pid_t> pids_;
  std::vector<UniqueFd> pidfds_;
  std::unique_ptr<EndWaker> end_waker_;
};

ShmComm::ShmComm(rendezvous::Store* store, const std::string& key, ShmMember me,
                 std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds op_timeout)
    : impl_(std::make_unique<Impl>(store, key, std::move(me), deadline, op_timeout)) {}
ShmComm::~ShmComm() = default;

void ShmComm::allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                        ReduceOp op, int divisor) {
  impl_->allreduce(send, recv, count, dtype, op, divisor);
}
void ShmComm::broadcast(void* buf, std::size_t bytes, int root) {
  impl_->broadcast(buf, bytes, root);
}
void ShmComm::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->allgather(send, recv, bytes);
}
void ShmComm::barrier() { impl_->barrier(); }
void ShmComm::phases(std::size_t phases, const std::function<void(std::size_t, char*)>& write,
                     const std::function<void(std::size_t, const char*)>& read) {
  impl_->phases(phases, write, read);
}
void ShmComm::abort(const std::string& why) noexcept { impl_->abort(why); }
int ShmComm::global_rank(int local) const { return impl_->rank_of(local); }
std::size_t ShmComm::chunk_bytes() const { return impl_->chunk_; }
void ShmComm::gather_then_reply(const void* send, void* recv, void* reply, std::size_t bytes,
                                std::chrono::steady_clock::time_point deadline,
                                const std::function<void()>& between) {
  impl_->gather_then_reply(send, recv, reply, bytes, deadline, between);
}
int ShmComm::pid_of(int local) const { return impl_->pid_of(local); }

}  // namespace hvdrun::runtime
