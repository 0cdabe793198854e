// The host's shared segment (runtime/shm/shm_comm.h): its layout, its creation by local rank 0
// and how it reaches the other local ranks. The segment is a memfd: local rank 0 serves it on an
// abstract unix socket and the others fetch it as SCM_RIGHTS. With a store the socket's name is
// random and travels only through the authenticated store under `key`; without one (the host checks
// in through its leader) `key` is the name itself, derived from the job secret. Both ends check
// that the other runs as the same user.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/fd.h"
#include "rendezvous/store.h"
#include "runtime/core/env.h"
#include "runtime/shm/shm_comm.h"

namespace hvdrun::runtime {

/// The segment's layout, shared by the code that creates it and the collectives.
namespace shm {

// "hvdrunsj": the layout's version too (a rank of another build refuses the segment).
constexpr std::uint64_t kMagic = 0x6876647275'6e736aULL;
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kLineBytes = 128;  // two cache lines: no false sharing via prefetch
constexpr std::size_t kBuffers = 3;
// Each rank's note of a phase (ShmComm::Notes, allgather_upto()'s small blocks): its length,
// then its bytes.
constexpr std::size_t kNoteBytes = 8u << 10;
// What each slot has beyond `chunk`: room for a large allreduce's Line::skew, a page (which
// keeps every slot page-aligned).
constexpr std::size_t kSkewRoom = 4096;

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
  // Where this rank's data starts in its slots during a large allreduce: its output's
  // offset within a page (kSkewRoom), so the copies in and out of the slots run with
  // source and destination aligned alike.
  std::atomic<std::uint32_t> skew{0};
};
static_assert(sizeof(Line) <= kLineBytes);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The phase counter wraps; ranks are never more than one phase apart.
inline bool reached(std::uint32_t have, std::uint32_t want) {
  return static_cast<std::int32_t>(have - want) >= 0;
}

/// One buffer: a slot of `chunk` + kSkewRoom bytes per local rank. The exchanges of
/// ShmComm::phases() see it as `local_size` slots of `chunk` bytes, back to back.
constexpr std::size_t buffer_bytes(std::size_t local_size, std::size_t chunk) {
  return local_size * (chunk + kSkewRoom);
}
/// Where the note areas start in a segment whose buffers start at `data_offset`: right after
/// the kBuffers buffers.
constexpr std::size_t notes_offset(std::size_t data_offset, std::size_t local_size,
                                   std::size_t chunk) {
  return data_offset + kBuffers * buffer_bytes(local_size, chunk);
}
/// The size of that segment: its kBuffers note areas of one kNoteBytes note per local rank
/// after the buffers.
constexpr std::size_t segment_bytes(std::size_t data_offset, std::size_t local_size,
                                    std::size_t chunk) {
  return notes_offset(data_offset, local_size, chunk) + kBuffers * local_size * kNoteBytes;
}

/// `v` rounded up to a multiple of `to`.
constexpr std::size_t round_up(std::size_t v, std::size_t to) { return (v + to - 1) / to * to; }

}  // namespace shm

/// A segment mapped into this process (unmapped by its owner).
struct Mapping {
  char* base = nullptr;
  std::size_t bytes = 0;
};

/// Name of the abstract socket through which local rank 0 hands out the host's segment
/// when the host checks in through it: HMAC(job secret, prefix | host), so only holders
/// of the secret can compute it (both ends still check the peer's uid).
std::string shm_socket_name(const Environment& env, const std::string& prefix);

/// Maps the segment behind `fd` and checks that its header is what `local_size` ranks
/// agree on; throws Error naming `who` otherwise (the mapping is then undone).
Mapping map_segment(int fd, int local_size, const std::string& who);

/// Local rank 0: creates the segment for `me`'s host (sized from HVDRUN_SHM_CHUNK_BYTES,
/// sealed against resizing, its header and control lines initialised) and, when the host
/// has other local ranks, hands it out to them (hand_out_segment). Returns the memfd.
UniqueFd create_segment(rendezvous::Store* store, const std::string& key, const ShmMember& me,
                        const std::string& who, std::chrono::steady_clock::time_point deadline);

/// Local rank 0: hands `memfd` to the other local ranks of `me`'s host, publishing the
/// socket's name under `key` when `store` is given. Returns once every one has it; throws
/// Error naming the local ranks still absent at `deadline`, or two processes that claim
/// one local rank. `who` names this rank in messages.
void hand_out_segment(const UniqueFd& memfd, rendezvous::Store* store, const std::string& key,
                      const ShmMember& me, const std::string& who,
                      std::chrono::steady_clock::time_point deadline);

/// Any other local rank: fetches the segment's memfd from local rank 0 (the socket's name
/// from `store`, or `key` itself), retrying until it has bound its socket or `deadline`
/// passes. Throws Error saying why local rank 0 did not serve this rank.
UniqueFd fetch_segment(rendezvous::Store* store, const std::string& key, const ShmMember& me,
                       const std::string& who, std::chrono::steady_clock::time_point deadline);

}  // namespace hvdrun::runtime
