// Single-copy exchange inside a host through the kernel's cross-memory attach
// (process_vm_readv): each local rank reads its pieces straight from the peers' send buffers
// into its receive buffer, so every byte is copied once instead of twice (into the shared
// segment, then out of it). The segment still carries the few bytes that coordinate it.
//
// The kernel allows the read only where the reader may ptrace the peer: the same
// credentials, the peer dumpable, Yama's ptrace_scope 0 (at 1, Ubuntu's default, sibling
// ranks may not), no seccomp filter refusing the call. Nothing here loosens that (no
// PR_SET_PTRACER): when any local rank is refused, every local rank learns it through the
// segment and the call goes through the segment instead.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/shm/shm_comm.h"
#include "runtime/shm/shm_exchange.h"

namespace hvdrun::runtime {

/// HVDRUN_CMA as this process reads it: unset (or `auto`) leaves the choice to the caller,
/// 1 (on, true, yes) turns the cross-memory path on, 0 (off, false, no) off.
enum class CmaSetting { kDefault, kOn, kOff };
CmaSetting cma_setting();

/// The stream exchange of shm_stream() over cross-memory attach. Every local rank must
/// call it with the same `stream_bytes`; `willing` is this rank's own choice, published to
/// the others. Returns true when every local rank was willing and read its pieces (recv
/// holds them); false, on every local rank alike, when any rank was unwilling or refused a
/// read, after which the caller must run the segment's exchange (recv may hold part of the
/// pieces, which that overwrites). No rank returns before every rank's reads of its `send`
/// are done. Throws Error only as the segment's phases do (a peer died or stopped).
bool cma_stream(ShmComm& shm, const void* send, const std::vector<std::size_t>& stream_bytes,
                void* recv, const std::vector<StreamPiece>& pieces, int me, bool willing);

}  // namespace hvdrun::runtime
