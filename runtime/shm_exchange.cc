// Stream exchange and reduce-scatter through the host's segment (see shm_exchange.h).
#include "runtime/shm_exchange.h"

#include <algorithm>
#include <cstring>

#include "runtime/shm_reduce.h"

namespace hvdrun::runtime {

void shm_stream(ShmComm& shm, const void* send, const std::vector<std::size_t>& stream_bytes,
                void* recv, const std::vector<StreamPiece>& pieces, int me) {
  const std::size_t chunk = shm.chunk_bytes();
  const std::size_t longest = *std::max_element(stream_bytes.begin(), stream_bytes.end());
  const std::size_t mine = stream_bytes[static_cast<std::size_t>(me)];
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  shm.phases((longest + chunk - 1) / chunk,
             [&](std::size_t i, char* slot) {
               const std::size_t at = i * chunk;
               if (at < mine) std::memcpy(slot, in + at, std::min(chunk, mine - at));
             },
             [&](std::size_t i, const char* region) {
               const std::size_t lo = i * chunk, hi = lo + chunk;
               for (const auto& p : pieces) {
                 const std::size_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.bytes);
                 if (a < b)
                   std::memcpy(out + p.dest + (a - p.offset),
                               region + static_cast<std::size_t>(p.from) * chunk + (a - lo), b - a);
               }
             });
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
