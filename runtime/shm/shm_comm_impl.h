// Inside the host's communicator (runtime/shm/shm_comm.h): the state of one local rank's
// membership, the segment's set-up and the waits every collective is built from. The
// collectives themselves are in shm_comm.cc. Internal to runtime/shm.
//
// Segment: a header page (sizes, the failure mark, the arrival count), one 128-byte
// control line per local rank (its phase counter, pid, global rank, last core and data skew), then
// three buffers, each with one slot of `chunk` (and shm::kSkewRoom) bytes per local rank, and three
// note areas, each with one note of shm::kNoteBytes per local rank (a buffer and a note area per
// phase). Its layout, its creation and its hand-out to the local ranks are in shm_segment.cc.
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
// Arrival is counted once per phase in the header (L per phase), so all waiters of a
// phase sleep on one futex word and the rank that completes the count wakes them with
// one call; each rank also keeps its own phase counter, to name late or dead ranks.
// Waits spin first while every awaited rank runs on another core (adaptive, up to 1 ms when
// every local rank has a core, 2 us when they share), yield the core once, then sleep in
// slices of at most 100 ms; between slices they check that every awaited rank's process
// still exists (pidfd), the segment's abort mark, and the deadline (HVDRUN_OP_TIMEOUT).
#pragma once

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/env_names.h"
#include "common/error.h"
#include "common/fd.h"
#include "common/seconds_text.h"
#include "runtime/core/generation_end.h"
#include "runtime/reduce/shm_reduce.h"
#include "runtime/shm/shm_comm.h"
#include "runtime/shm/shm_segment.h"
#include "runtime/shm/shm_wait.h"

namespace hvdrun::runtime {

class ShmComm::Impl {
 public:
  using Clock = std::chrono::steady_clock;
  using milliseconds = std::chrono::milliseconds;
  using Header = shm::Header;
  using Line = shm::Line;
  static constexpr std::size_t kSmallBytes = 8u << 10;
  static constexpr milliseconds kSlice{100};
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
    // takes a core some rank needs, so waits sleep after 2 us: a shm::futex wake-up hands the
    // core over, where sched_yield on a busy host mostly hands it to another program
    // (measured: 30 us per 8-byte allreduce at np 4 on 2 cores with the shm::futex, 150-1400
    // us with 100 us of yielding first). A rank its agent bound (--bind-to) has cores of its
    // own, though it may run on fewer CPUs than the host has ranks (measured on 2 busy cores,
    // np 2 bound to a core each, medians of 8: 4 MiB allreduce 1.35 ms spinning, 1.60 ms
    // sleeping after 2 us; 256 KiB 77 us and 104 us).
    const char* bind = std::getenv(env_names::kBindTo);
    const bool bound = bind != nullptr && *bind != '\0' && std::string_view(bind) != "none";
    const bool own_cores = bound || shm::online_cpus() >= L_;
    max_spin_ = own_cores ? std::chrono::microseconds(1000) : std::chrono::microseconds(2);
    // A peer that slept takes 5-20 us to wake; a shorter floor would make both sides
    // miss each other for ever once they both sleep.
    min_spin_ = own_cores ? std::chrono::microseconds(50) : std::chrono::microseconds(2);
    if (const char* v = std::getenv("HVDRUN_SHM_SPIN_US"))
      min_spin_ = max_spin_ = std::chrono::microseconds(std::strtoll(v, nullptr, 10));
    spin_ = max_spin_;
    if (const char* v = std::getenv("HVDRUN_SHM_YIELDS"))
      yields_ = std::max(1, static_cast<int>(std::strtol(v, nullptr, 10)));
    UniqueFd memfd = me_.local_rank == 0 ? create_segment(store, key, me_, who_, deadline)
                                         : fetch_segment(store, key, me_, who_, deadline);
    map(memfd.get());
    attach(deadline);
    // The generation's end (runtime/core/generation_end.h) marks the segment failed, which
    // wakes this host's sleeping waiters, those of other processes included.
    end_waker_ = std::make_unique<EndWaker>([this](const std::string& why) { abort(why); });
  }

  ~Impl() {
    end_waker_.reset();  // before the segment it writes to goes
    if (base_ != nullptr) ::munmap(base_, mapped_);
  }

  // --- segment set-up ---

  void map(int fd) {
    const Mapping m = map_segment(fd, L_, who_);
    base_ = m.base;
    mapped_ = m.bytes;
    header_ = std::launder(reinterpret_cast<Header*>(base_));
    chunk_ = header_->chunk;
    data_ = base_ + header_->data_offset;
    notes_ = base_ + shm::notes_offset(header_->data_offset, static_cast<std::size_t>(L_), chunk_);
  }

  Line& line(int l) const {
    return *std::launder(reinterpret_cast<Line*>(base_ + shm::kHeaderBytes +
                                                 shm::kLineBytes * static_cast<std::size_t>(l)));
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
    skews_.assign(static_cast<std::size_t>(L_), 0);
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
            UniqueFd(shm::pidfd_open(pids_[static_cast<std::size_t>(l)]));
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
    cpu_ = ::sched_getcpu();
    mine.cpu.store(cpu_, std::memory_order_relaxed);
    mine.phase.store(phase_, std::memory_order_release);
    const std::uint32_t target = phase_ * static_cast<std::uint32_t>(L_);
    const std::uint32_t now = header_->arrived.fetch_add(1, std::memory_order_seq_cst) + 1;
    if (now == target && header_->sleepers.load(std::memory_order_seq_cst) != 0)
      shm::futex(&header_->arrived, FUTEX_WAKE, INT_MAX, nullptr);
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
    return shm::reached(header_->arrived.load(std::memory_order_acquire),
                        phase_ * static_cast<std::uint32_t>(L_));
  }

  // Whether every rank that has not yet arrived was last seen on another core, where it
  // can run while this rank spins. One that was last seen on this core most likely waits
  // for it: spinning would only keep it waiting. True when every rank has arrived since
  // the caller looked (the spin then ends at once): a false here would cost a sched_yield
  // for a wait that is over, which at np 2 on two cores happened in 1 wait of 20.
  bool awaited_elsewhere() const {
    const int here = cpu_;  // where this rank published from, a moment ago
    for (int l = 0; l < L_; ++l) {
      const auto& ln = line(l);
      if (l == me_.local_rank || shm::reached(ln.phase.load(std::memory_order_relaxed), phase_))
        continue;
      if (ln.cpu.load(std::memory_order_relaxed) == here) return false;
    }
    return true;
  }

  void wait_all(Clock::time_point deadline, const char* what) {
    if (all_arrived()) return;
    if (spin_.count() > 0 && awaited_elsewhere()) {
      // The spin's end is taken at its first check, 64 relaxes in: most waits are over
      // before, and read no clock.
      Clock::time_point spin_until{};
      for (unsigned i = 1;; ++i) {
        if (all_arrived()) {
          spin_ = std::min(max_spin_, spin_ * 2);
          return;
        }
        shm::cpu_relax();
        if ((i & 63) == 0) {
          generation_end().check();
          if (header_->abort_rank.load(std::memory_order_relaxed) != 0) failed_elsewhere();
          const auto now = Clock::now();
          if (i == 64) spin_until = now + spin_;
          if (now > spin_until) break;
        }
      }
      spin_ = std::max(min_spin_, spin_ / 2);
    }
    // One yield before sleeping: an awaited rank that is runnable on this core gets it
    // without the shm::futex round trip (measured on 2 busy cores: an 8-byte allreduce at np 2
    // 4.7 -> 1.9 us, at np 4 12 -> 5.6 us; more yields or yielding for longer lost to
    // other programs taking the core).
    for (int i = 0; i < yields_; ++i) {
      ::sched_yield();
      if (all_arrived()) return;
    }
    const std::uint32_t target = phase_ * static_cast<std::uint32_t>(L_);
    if (deadline == kLazyDeadline) deadline = op_deadline();
    for (;;) {
      generation_end().check();
      if (header_->abort_rank.load(std::memory_order_acquire) != 0) failed_elsewhere();
      const auto left = left_until(deadline);
      if (left == Clock::duration::zero()) timed_out(phase_, what);
      auto slice = std::min<Clock::duration>(left, kSlice);
      timespec ts{};
      ts.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(slice).count();
      ts.tv_nsec = static_cast<long>((slice - std::chrono::seconds(ts.tv_sec)) /
                                     std::chrono::nanoseconds(1));
      header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = header_->arrived.load(std::memory_order_seq_cst);
      if (!shm::reached(seen, target)) shm::futex(&header_->arrived, FUTEX_WAIT, seen, &ts);
      header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (all_arrived()) return;
      for (int l = 0; l < L_; ++l) {
        if (l == me_.local_rank ||
            shm::reached(line(l).phase.load(std::memory_order_acquire), phase_) || alive(l))
          continue;
        if (shm::reached(line(l).phase.load(std::memory_order_acquire), phase_)) continue;
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
      if (!shm::reached(line(l).phase.load(std::memory_order_acquire), want))
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
    shm::futex(&header_->arrived, FUTEX_WAKE, INT_MAX, nullptr);
  }

  void check_healthy() {
    generation_end().check();
    if (header_->abort_rank.load(std::memory_order_acquire) != 0) failed_elsewhere();
  }

  Clock::time_point op_deadline() const { return Clock::now() + op_timeout_; }
  // A wait's deadline to be taken as op_deadline() when the wait first sleeps: for a
  // single phase, whose spin before that is bounded (max_spin_), so the limit moves by
  // microseconds at most.
  static constexpr Clock::time_point kLazyDeadline = Clock::time_point::max();

  // --- buffers ---

  // Buffer of phase p; slot of local rank l in it, as phases() lays them out (chunk_ apart),
  // and as the large allreduce does (with room for the skew).
  char* region(std::uint32_t p) const {
    return data_ + (p % shm::kBuffers) * shm::buffer_bytes(static_cast<std::size_t>(L_), chunk_);
  }
  char* slot(std::uint32_t p, int l) const {
    return region(p) + static_cast<std::size_t>(l) * chunk_;
  }
  char* wide_slot(std::uint32_t p, int l) const {
    return region(p) + static_cast<std::size_t>(l) * (chunk_ + shm::kSkewRoom);
  }
  // Note of local rank l in phase p: its length, then its bytes.
  char* note(std::uint32_t p, int l) const {
    return notes_ +
           ((p % shm::kBuffers) * static_cast<std::size_t>(L_) + static_cast<std::size_t>(l)) *
               shm::kNoteBytes;
  }
  using Length = std::uint64_t;
  static constexpr std::size_t kNoteRoom = shm::kNoteBytes - sizeof(Length);

  void write_note(std::uint32_t p, const void* send, std::size_t used) {
    char* own = note(p, me_.local_rank);
    const Length n = used;
    std::memcpy(own, &n, sizeof n);
    std::memcpy(own + sizeof n, send, used);
  }
  // Every rank's note of phase p into `recv`, `bytes` apart; the rest of each block as it was.
  void read_notes(std::uint32_t p, void* recv, std::size_t bytes) const {
    auto* out = static_cast<char*>(recv);
    for (int l = 0; l < L_; ++l, out += bytes) {
      const char* from = note(p, l);
      Length len = 0;
      std::memcpy(&len, from, sizeof len);
      std::memcpy(out, from + sizeof len, static_cast<std::size_t>(std::min<Length>(len, bytes)));
    }
  }
  // The notes of phase p read out, then what the ranks agreed (the same on every rank).
  bool agreed(std::uint32_t p, const ShmComm::Notes& n) const {
    read_notes(p, n.notes, n.bytes);
    return (*n.agreed)();
  }
  void check_notes(const ShmComm::Notes& n) const {
    if (n.bytes > kNoteRoom || n.used > n.bytes)
      throw Error("shared memory: " + who_ + ": a note of " + std::to_string(n.used) + " of " +
                  std::to_string(n.bytes) + " bytes does not fit the " + std::to_string(kNoteRoom) +
                  " a step carries");
  }

  // --- collectives (shm_comm.cc) ---

  // With `notes`, they ride in the first phase and the reduction goes on only when the ranks
  // agree (returns false otherwise, `recv` untouched); true once the result is in `recv`.
  bool allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 int divisor, const ShmComm::Notes* notes = nullptr);
  void broadcast(void* buf, std::size_t bytes, int root);
  void allgather(const void* send, void* recv, std::size_t bytes);
  // Blocks up to kNoteRoom move as notes, in the place allreduce()'s notes take (a rank
  // exchanging its brief meets one whose brief rides with its data); larger ones whole.
  void allgather_upto(const void* send, std::size_t used, void* recv, std::size_t bytes);
  void phases(std::size_t count, const std::function<void(std::size_t, char*)>& write,
              const std::function<void(std::size_t, const char*)>& read);
  void barrier();
  void gather_then_reply(const void* send, void* recv, void* reply, std::size_t bytes,
                         Clock::time_point deadline, const std::function<void()>& between);

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
  char* notes_ = nullptr;
  std::size_t chunk_ = 0;
  std::uint32_t phase_ = 0;
  int cpu_ = -1;  // the core this rank last published from
  std::vector<int> ranks_;
  std::vector<pid_t> pids_;
  std::vector<std::uint32_t> skews_;  // every rank's Line::skew in the large allreduce under way
  std::vector<UniqueFd> pidfds_;
  std::unique_ptr<EndWaker> end_waker_;
};

}  // namespace hvdrun::runtime
