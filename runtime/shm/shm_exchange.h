// Exchanges through a host's shared segment, built on ShmComm::phases(): a stream
// exchange (every local rank streams its buffer through its slot; each reader copies
// out the parts meant for it: alltoallv, gatherv and scatterv are all this one), and a
// reduce-scatter (each rank reduces only its own slice, from every rank's input). Every
// byte crosses the segment once, and every rank works on its own share at once. With
// HVDRUN_CMA=1 large streams skip the segment: each rank reads its pieces from the peers'
// buffers (cma.h). A large output is advised to take transparent huge pages.
#pragma once

#include <cstddef>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/shm/shm_comm.h"

namespace hvdrun::runtime {

/// A part of one local rank's stream that the calling rank receives.
struct StreamPiece {
  int from = 0;            ///< local rank whose stream holds it
  std::size_t offset = 0;  ///< byte offset in that stream
  std::size_t bytes = 0;   ///< length
  std::size_t dest = 0;    ///< byte offset in the receive buffer
};

/// How shm_stream() moves the bytes: kAuto takes the segment, or cross-memory attach
/// (runtime/shm/cma.h) from kCmaMinBytes where HVDRUN_CMA=1; kSegment forces the segment;
/// kCrossMemory tries cross-memory attach at any size unless HVDRUN_CMA=0. Where any local
/// rank is refused or unwilling, every rank falls back to the segment alike.
enum class StreamPath { kAuto, kSegment, kCrossMemory };

/// The longest stream from which kAuto may read the peers' buffers directly (HVDRUN_CMA=1).
/// Below it the pipeline through the segment is faster: its chunks stay in the cache, so
/// the second copy costs little, and the direct reads add two syncs.
inline constexpr std::size_t kCmaMinBytes = std::size_t{4} << 20;

/// Every local rank streams its `send` (stream_bytes[l] bytes for local rank l: the same
/// vector on every rank) through the segment; the calling rank copies `pieces` of the
/// streams into `recv`. Every local rank must call it. The pieces a rank takes from its
/// own stream are copied directly and never enter the segment, so no other rank may take
/// those bytes. Streams are rotated (each starts at its rank's share of it) so that in an
/// alltoall every rank copies out one chunk per step. Where StreamPath allows it (kAuto:
/// HVDRUN_CMA=1 and a stream of kCmaMinBytes or more) each rank instead reads its pieces straight
/// from the peers' `send` with process_vm_readv, one copy instead of two; every local rank takes
/// the same path, and no rank returns before every peer has finished reading its `send`. Returns
/// true when the bytes went by cross-memory attach, false through the segment. `path` must be the
/// same on every local rank.
bool shm_stream(ShmComm& shm, const void* send, const std::vector<std::size_t>& stream_bytes,
                void* recv, const std::vector<StreamPiece>& pieces, int me,
                StreamPath path = StreamPath::kAuto);

/// Reduce-scatter among the local ranks: each holds the same `counts` total elements of
/// `dtype` in `send`; local rank l receives, in `recv`, the reduction of its slice
/// [first_l, first_l + counts[l]) (first_l: the sum of the counts before it). Average
/// divides by `divisor`. `recv` must not overlap `send`.
void shm_reducescatter(ShmComm& shm, const void* send, void* recv,
                       const std::vector<std::size_t>& counts, DataType dtype, ReduceOp op,
                       int divisor, int me);

}  // namespace hvdrun::runtime
