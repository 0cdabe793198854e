// The stream exchange over cross-memory attach (see cma.h).
#include "runtime/shm/cma.h"

#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace hvdrun::runtime {

namespace {

// What each local rank publishes in the segment before the reads: where its stream lies,
// and a fresh random token (with its address) that a reader fetches first, so it never
// takes bytes from a process that is not the peer (another pid namespace, a stale pid).
struct CmaOffer {
  std::uint64_t pid = 0;
  std::uint64_t send = 0;
  std::uint64_t token_at = 0;
  std::uint64_t token = 0;
  std::uint32_t willing = 0;
};

// Reads `bytes` at `remote` in process `pid` into `local`, calling again after a short
// read. Returns false when the kernel refuses or fails the read.
bool cma_read(pid_t pid, void* local, std::uint64_t remote, std::size_t bytes) {
  auto* to = static_cast<char*>(local);
  while (bytes > 0) {
    iovec here{to, bytes};
    iovec there{reinterpret_cast<void*>(remote), bytes};  // NOLINT(performance-no-int-to-ptr)
    const ssize_t got = ::process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    const auto n = static_cast<std::size_t>(got);
    to += n;
    remote += n;
    bytes -= n;
  }
  return true;
}

// A rank's own reads: the token of each peer it takes from, then its pieces, peers in turn
// from the next local rank on (so the ranks of an alltoall do not all start at rank 0).
bool read_pieces(const std::vector<CmaOffer>& offers, const void* send, void* recv,
                 std::vector<StreamPiece> pieces, int me) {
  const auto L = static_cast<int>(offers.size());
  std::sort(pieces.begin(), pieces.end(), [&](const StreamPiece& a, const StreamPiece& b) {
    return (a.from - me - 1 + L) % L < (b.from - me - 1 + L) % L;
  });
  auto* out = static_cast<char*>(recv);
  int checked = -1;
  for (const auto& p : pieces) {
    if (p.bytes == 0) continue;
    if (p.from == me) {
      std::memcpy(out + p.dest, static_cast<const char*>(send) + p.offset, p.bytes);
      continue;
    }
    const auto& peer = offers[static_cast<std::size_t>(p.from)];
    const auto pid = static_cast<pid_t>(peer.pid);
    if (checked != p.from) {
      std::uint64_t token = 0;
      if (!cma_read(pid, &token, peer.token_at, sizeof token) || token != peer.token) return false;
      checked = p.from;
    }
    if (!cma_read(pid, out + p.dest, peer.send + p.offset, p.bytes)) return false;
  }
  return true;
}

}  // namespace

CmaSetting cma_setting() {
  const char* v = std::getenv("HVDRUN_CMA");
  const std::string_view s = v == nullptr ? "" : v;
  if (s == "1" || s == "on" || s == "true" || s == "yes") return CmaSetting::kOn;
  if (s == "0" || s == "off" || s == "false" || s == "no") return CmaSetting::kOff;
  return CmaSetting::kDefault;
}

bool cma_stream(ShmComm& shm, const void* send, const std::vector<std::size_t>& stream_bytes,
                void* recv, const std::vector<StreamPiece>& pieces, int me, bool willing) {
  const std::size_t L = stream_bytes.size();
  std::uint64_t token = 0;
  CmaOffer mine;
  mine.pid = static_cast<std::uint64_t>(::getpid());
  mine.send = reinterpret_cast<std::uintptr_t>(send);
  mine.token_at = reinterpret_cast<std::uintptr_t>(&token);
  mine.willing = willing && ::getrandom(&token, sizeof token, GRND_NONBLOCK) ==
                                static_cast<ssize_t>(sizeof token);
  mine.token = token;
  std::vector<CmaOffer> offers(L);
  bool all_willing = true;
  shm.phases(
      1, [&](std::size_t, char* slot) { std::memcpy(slot, &mine, sizeof mine); },
      [&](std::size_t, const char* region) {
        for (std::size_t l = 0; l < L; ++l) {
          std::memcpy(&offers[l], region + l * shm.chunk_bytes(), sizeof(CmaOffer));
          all_willing = all_willing && offers[l].willing != 0;
        }
      });
  if (!all_willing) return false;
  const std::uint32_t done = read_pieces(offers, send, recv, pieces, me) ? 1 : 0;
  // The closing phase: no rank returns (and frees its send buffer, or its token) before
  // every rank has finished reading, and every rank learns whether all of them could.
  bool all_done = true;
  shm.phases(
      1, [&](std::size_t, char* slot) { std::memcpy(slot, &done, sizeof done); },
      [&](std::size_t, const char* region) {
        for (std::size_t l = 0; l < L; ++l) {
          std::uint32_t d = 0;
          std::memcpy(&d, region + l * shm.chunk_bytes(), sizeof d);
          all_done = all_done && d != 0;
        }
      });
  return all_done;
}

}  // namespace hvdrun::runtime
