// Shared-memory collectives among the ranks of one host (see shm_comm.h), built from the
// phases and waits of runtime/shm/shm_comm_impl.h.
//
// allreduce, large: phase i copies chunk i of the input into the own slot, reduces the
// own part (1/L of chunk i-1) across every slot in place, and copies every rank's reduced
// part of chunk i-2 to the output: a reduce-scatter then an all-gather inside the
// segment, pipelined in chunks so each step works on data still in cache. Small: one
// phase copies the input in, then every rank reduces all slots itself (one wait, not two).
// Notes (the engine's briefs) may ride in an allreduce's first phase: each rank writes its
// note beside its first chunk, and after that phase's wait every rank reads every note and
// asks whether the ranks agree before it reduces anything. allgather_upto() of blocks that
// fit a note moves them through the same notes, so the ranks of one round meet whichever of
// the two each runs.
#include "runtime/shm/shm_comm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "common/error.h"
#include "runtime/reduce/shm_reduce.h"
#include "runtime/shm/shm_comm_impl.h"
#include "runtime/shm/shm_segment.h"

namespace hvdrun::runtime {

bool ShmComm::Impl::allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                              ReduceOp op, int divisor, const ShmComm::Notes* notes) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t bytes = count * es;
  if (divisor <= 0) divisor = L_;
  auto* out = static_cast<char*>(recv);
  const auto* in = static_cast<const char*>(send);
  if (notes != nullptr) check_notes(*notes);
  if (L_ == 1 || count == 0) {
    if (notes != nullptr) {  // nothing to carry them: a step of their own
      allgather_upto(notes->note, notes->used, notes->notes, notes->bytes);
      if (!(*notes->agreed)()) return false;
    }
    if (send != recv && bytes > 0) std::memmove(recv, send, bytes);
    finish_average(recv, count, dtype, op, divisor);
    return true;
  }
  check_healthy();
  const auto deadline = op_deadline();
  if (bytes <= std::min(kSmallBytes, chunk_)) {
    const std::uint32_t p = phase_ + 1;
    std::memcpy(slot(p, me_.local_rank), in, bytes);
    if (notes != nullptr) write_note(p, notes->note, notes->used);
    sync(deadline);
    if (notes != nullptr && !agreed(p, *notes)) return false;
    // Every rank reduces every slot, in local rank order: the same result everywhere.
    std::memcpy(out, slot(p, 0), bytes);
    for (int l = 1; l < L_; ++l) reduce_into(out, slot(p, l), count, dtype, op);
    finish_average(out, count, dtype, op, divisor);
    return true;
  }
  // Each rank's data starts `skew` bytes into its slots, its output's offset in a page (a
  // whole number of elements): the copies out of the slots (and in, when the input is
  // aligned as the output is, or is the output) then have source and destination at the
  // same offset in their pages, which glibc's memcpy needs for its full speed
  // (docs/performance.md, rows 98 and 100).
  const auto skew =
      static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(out) % shm::kSkewRoom / es * es);
  line(me_.local_rank).skew.store(skew, std::memory_order_relaxed);
  const std::size_t per_chunk = chunk_ / es;  // elements per rank per phase
  const std::size_t chunks = (count + per_chunk - 1) / per_chunk;
  const std::size_t align = std::max<std::size_t>(1, 64 / es);
  auto chunk_len = [&](std::size_t c) { return std::min(per_chunk, count - c * per_chunk); };
  // Part of local rank l within a chunk of m elements: [first, last).
  auto part = [&](std::size_t m, int l) {
    const std::size_t per = shm::round_up((m + L_ - 1) / L_, align);
    const std::size_t first = std::min(m, per * static_cast<std::size_t>(l));
    return std::pair{first, std::min(m, first + per)};
  };
  // Rank l's data in phase p, at the skew copied after the first phase's wait (when every rank
  // has published it): a faster rank may publish its next call's skew while this rank still
  // copies out, so the copy is read, not the line.
  auto data = [&](std::uint32_t p, int l) {
    return wide_slot(p, l) + skews_[static_cast<std::size_t>(l)];
  };
  auto copy_out = [&](std::size_t c, std::uint32_t p) {
    const std::size_t m = chunk_len(c);
    for (int l = 0; l < L_; ++l) {
      auto [first, last] = part(m, l);
      if (last > first)
        std::memcpy(out + (c * per_chunk + first) * es, data(p, l) + first * es,
                    (last - first) * es);
    }
  };
  for (std::size_t i = 0; i <= chunks; ++i) {
    const std::uint32_t p = phase_ + 1;
    if (i < chunks)
      std::memcpy(wide_slot(p, me_.local_rank) + skew, in + i * per_chunk * es, chunk_len(i) * es);
    if (i == 0 && notes != nullptr) write_note(p, notes->note, notes->used);
    if (i >= 1) {
      auto [first, last] = part(chunk_len(i - 1), me_.local_rank);
      if (last > first) {
        char* acc = data(p - 1, me_.local_rank) + first * es;
        for (int l = 0; l < L_; ++l)
          if (l != me_.local_rank)
            reduce_into(acc, data(p - 1, l) + first * es, last - first, dtype, op);
        finish_average(acc, last - first, dtype, op, divisor);
      }
    }
    if (i >= 2) copy_out(i - 2, p - 2);
    sync(deadline);
    if (i == 0) {
      if (notes != nullptr && !agreed(p, *notes)) return false;
      for (int l = 0; l < L_; ++l)
        skews_[static_cast<std::size_t>(l)] = line(l).skew.load(std::memory_order_relaxed);
    }
  }
  copy_out(chunks - 1, phase_ - 1);
  return true;
}

void ShmComm::Impl::broadcast(void* buf, std::size_t bytes, int root) {
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

void ShmComm::Impl::allgather(const void* send, void* recv, std::size_t bytes) {
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

void ShmComm::Impl::allgather_upto(const void* send, std::size_t used, void* recv,
                                   std::size_t bytes) {
  // Decided on `bytes`, the same on every rank (`used` is each rank's own).
  if (L_ == 1 || bytes == 0 || bytes > kNoteRoom) {
    allgather(send, recv, bytes);
    return;
  }
  check_healthy();
  // One phase: its deadline is taken only if the wait comes to sleep (kLazyDeadline),
  // which spares the steady state's round a clock read.
  const std::uint32_t p = phase_ + 1;
  write_note(p, send, std::min(used, bytes));
  sync(kLazyDeadline);
  read_notes(p, recv, bytes);
}

void ShmComm::Impl::phases(std::size_t count, const std::function<void(std::size_t, char*)>& write,
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

void ShmComm::Impl::barrier() {
  if (L_ == 1) return;
  check_healthy();
  sync(op_deadline());
}

void ShmComm::Impl::gather_then_reply(const void* send, void* recv, void* reply, std::size_t bytes,
                                      Clock::time_point deadline,
                                      const std::function<void()>& between) {
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
  sync(me_.local_rank == 0 ? deadline : deadline + std::chrono::seconds(2), "the host's check-in");
  if (me_.local_rank != 0) std::memcpy(reply, slot(p + 1, 0), bytes);
}

ShmComm::ShmComm(rendezvous::Store* store, const std::string& key, ShmMember me,
                 std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds op_timeout)
    : impl_(std::make_unique<Impl>(store, key, std::move(me), deadline, op_timeout)) {}
ShmComm::~ShmComm() = default;

void ShmComm::allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                        ReduceOp op, int divisor) {
  (void)impl_->allreduce(send, recv, count, dtype, op, divisor);
}
bool ShmComm::allreduce_agreed(const void* send, void* recv, std::size_t count, DataType dtype,
                               ReduceOp op, int divisor, const Notes& notes) {
  return impl_->allreduce(send, recv, count, dtype, op, divisor, &notes);
}
std::size_t ShmComm::note_bytes() { return Impl::kNoteRoom; }
void ShmComm::broadcast(void* buf, std::size_t bytes, int root) {
  impl_->broadcast(buf, bytes, root);
}
void ShmComm::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->allgather(send, recv, bytes);
}
void ShmComm::barrier() { impl_->barrier(); }
void ShmComm::allgather_upto(const void* send, std::size_t used, void* recv, std::size_t bytes) {
  impl_->allgather_upto(send, used, recv, bytes);
}
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
