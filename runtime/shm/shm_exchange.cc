// Stream exchange and reduce-scatter through the host's segment (see shm_exchange.h).
#include "runtime/shm/shm_exchange.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/reduce/shm_reduce.h"
#include "runtime/shm/cma.h"

namespace hvdrun::runtime {

namespace {

// Where local rank w's stream starts in its slots: each stream is rotated by (w + 1) / L
// of its length. In an alltoall reader r takes block r of every stream; unrotated, every
// writer would carry block k at the same steps, so one reader copied out L chunks per step
// while the others waited on it (np 4: 1.3-1.9x slower than pairwise TCP). Rotated,
// writer w carries block (w + 1 + k) mod L in the k-th L-th of the steps, so at every
// step each reader copies one chunk, from a different writer, and each writer's block for
// itself comes last. Gathers and scatters keep their balance (one side takes or gives
// everything either way).
std::size_t rotation(std::size_t bytes, std::size_t w, std::size_t L) {
  return w + 1 == L ? 0 : bytes / L * (w + 1);
}

// A piece's place among the bytes its writer puts through the slots: `offset` is the
// position in the rotated stream.
struct Span {
  std::size_t from = 0;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  std::size_t dest = 0;
};

// A large output (of an exchange or a reduce-scatter) is most often fresh memory (torch allocates
// each result anew), whose first touch faults in every 4 KiB page: half the time of a 64 MiB
// alltoall at np 2 here. Transparent huge pages are usually on only where asked for (`madvise`
// mode), so the 2 MiB-aligned interior of the output is asked for them: 512 times fewer faults. It
// is a hint on the caller's pages, which this call fills entirely; memory already in place keeps
// its pages.
void advise_huge_pages(void* recv, std::size_t end) {
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  if (end < 2 * kHuge) return;
  const auto at = reinterpret_cast<std::uintptr_t>(recv);
  const std::uintptr_t first = (at + kHuge - 1) & ~(kHuge - 1), last = (at + end) & ~(kHuge - 1);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the aligned interior of the caller's buffer
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

}  // namespace

bool shm_stream(ShmComm& shm, const void* send, const std::vector<std::size_t>& stream_bytes,
                void* recv, const std::vector<StreamPiece>& pieces, int me, StreamPath path) {
  const std::size_t chunk = shm.chunk_bytes();
  const std::size_t L = stream_bytes.size();
  const std::size_t longest = *std::max_element(stream_bytes.begin(), stream_bytes.end());
  std::size_t received = 0;
  for (const auto& p : pieces) received = std::max(received, p.dest + p.bytes);
  advise_huge_pages(recv, received);
  // Whether to try cross-memory attach is decided from what every local rank holds alike,
  // so all enter it together; each rank's HVDRUN_CMA only makes it willing or not, which
  // they agree on inside.
  const bool cross = L > 1 && (path == StreamPath::kCrossMemory ||
                               (path == StreamPath::kAuto && longest >= kCmaMinBytes));
  if (cross) {
    const CmaSetting setting = cma_setting();
    const bool willing = setting == CmaSetting::kOn ||
                         (setting == CmaSetting::kDefault && path == StreamPath::kCrossMemory);
    if (cma_stream(shm, send, stream_bytes, recv, pieces, me, willing)) return true;
  }
  const auto w = static_cast<std::size_t>(me);
  const std::size_t mine = stream_bytes[w];
  const std::size_t turn = rotation(mine, w, L);
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  // The pieces from other ranks as spans of the rotated streams (a piece that wraps past
  // a stream's end is two spans); the pieces of this rank's own stream are copied
  // straight from `send` and left out of the segment (`own`: where they lie in it).
  std::vector<Span> spans, own;
  spans.reserve(pieces.size() + 1);
  for (const auto& p : pieces) {
    const auto from = static_cast<std::size_t>(p.from);
    if (from == w) {
      std::memcpy(out + p.dest, in + p.offset, p.bytes);
    }
    const std::size_t total = stream_bytes[from];
    const std::size_t r = rotation(total, from, L);
    const std::size_t at = p.offset >= r ? p.offset - r : p.offset + total - r;
    const std::size_t first = std::min(p.bytes, total - at);
    auto& into = from == w ? own : spans;
    into.push_back({from, at, first, p.dest});
    if (first < p.bytes) into.push_back({from, 0, p.bytes - first, p.dest + first});
  }
  std::sort(own.begin(), own.end(),
            [](const Span& a, const Span& b) { return a.offset < b.offset; });
  // Copies [a, b) of the rotated stream to slot + (a - at).
  auto put = [&](char* slot, std::size_t at, std::size_t a, std::size_t b) {
    if (a >= b) return;
    const std::size_t src = (turn + a) % mine;
    const std::size_t head = std::min(b - a, mine - src);
    std::memcpy(slot + (a - at), in + src, head);
    if (head < b - a) std::memcpy(slot + (a - at) + head, in, b - a - head);
  };
  shm.phases((longest + chunk - 1) / chunk,
             [&](std::size_t i, char* slot) {
               const std::size_t at = i * chunk;
               if (at >= mine) return;
               const std::size_t end = at + std::min(chunk, mine - at);
               std::size_t pos = at;
               for (const auto& o : own) {
                 if (o.offset >= end) break;
                 put(slot, at, pos, std::min(end, o.offset));
                 pos = std::max(pos, o.offset + o.bytes);
               }
               put(slot, at, pos, end);
             },
             [&](std::size_t i, const char* region) {
               const std::size_t lo = i * chunk, hi = lo + chunk;
               for (const auto& s : spans) {
                 const std::size_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.bytes);
                 if (a < b)
                   std::memcpy(out + s.dest + (a - s.offset), region + s.from * chunk + (a - lo),
                               b - a);
               }
             });
  return false;
}

void shm_reducescatter(ShmComm& shm, const void* send, void* recv,
                       const std::vector<std::size_t>& counts, DataType dtype, ReduceOp op,
                       int divisor, int me) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t L = counts.size();
  // Each slot holds one part per rank: rank r's part carries the next elements of slice r.
  const std::size_t part = shm.chunk_bytes() / L / 64 * 64;
  const std::size_t per = part / es;  // elements of a slice per step
  if (per == 0)
    throw Error("shared memory: the segment's chunk (" + std::to_string(shm.chunk_bytes()) +
                " bytes) is too small for a reduce-scatter among " + std::to_string(L) +
                " local ranks; raise HVDRUN_SHM_CHUNK");
  std::vector<std::size_t> first(L, 0);
  for (std::size_t r = 1; r < L; ++r) first[r] = first[r - 1] + counts[r - 1];
  const std::size_t longest = *std::max_element(counts.begin(), counts.end());
  const std::size_t chunk = shm.chunk_bytes();
  const std::size_t own = counts[static_cast<std::size_t>(me)];
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  advise_huge_pages(recv, own * es);
  shm.phases((longest + per - 1) / per,
             [&](std::size_t i, char* slot) {
               const std::size_t lo = i * per;
               for (std::size_t r = 0; r < L; ++r)
                 if (lo < counts[r])
                   std::memcpy(slot + r * part, in + (first[r] + lo) * es,
                               std::min(per, counts[r] - lo) * es);
             },
             [&](std::size_t i, const char* region) {
               const std::size_t lo = i * per;
               if (lo >= own) return;
               const std::size_t n = std::min(per, own - lo);
               char* acc = out + lo * es;
               const std::size_t at = static_cast<std::size_t>(me) * part;
               std::memcpy(acc, region + at, n * es);
               for (std::size_t l = 1; l < L; ++l)
                 reduce_into(acc, region + l * chunk + at, n, dtype, op);
               finish_average(acc, n, dtype, op, divisor);
             });
}

}  // namespace hvdrun::runtime
