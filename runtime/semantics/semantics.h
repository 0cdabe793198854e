// What a collective means, decided once between the public API (runtime/api/) and the
// transports (host path, NCCL): the ranks it runs among (the job or a process set), its
// scale factors applied to host buffers with Horovod's arithmetic (prescale before the
// data moves, postscale after; Average itself is finished by the transports while the
// data is hot, runtime/reduce/shm_reduce.h finish_average), an alltoall's splits (checked
// at submission, then exchanged before the rows) and a reduce-scatter's row split. The
// framework adapters (hvdrun.torch, hvdrun.tensorflow) hand complete operations to the C
// ABI and do none of this arithmetic for host tensors. Internal: not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/engine/engine.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace hvdrun::semantics {

// The ranks a collective runs among: the whole job, or a process set's members.
struct Group {
  runtime::World* world = nullptr;
  runtime::ProcessSet* set = nullptr;  // null: every rank
  int rank = 0;
  int size = 1;
  runtime::HostComm& host() const { return set != nullptr ? *set->host : world->host(); }
  // The GPU communicator; a set builds its own on first use (every member reaches this
  // point of the agreed order together).
  runtime::NcclComm& nccl() const {
    if (set == nullptr) return *world->nccl();
    if (!set->nccl)
      set->nccl = world->subset_nccl(rendezvous::Key(set->prefix) / "nccl" / "id", set->rank,
                                     static_cast<int>(set->ranks.size()));
    return *set->nccl;
  }
};

/// Checks an alltoall's splits at submission: one entry per rank of `n`, none negative,
/// adding up to the tensor; without splits the tensor must divide equally. Throws Error.
void check_splits(const Collective& c, int n);

/// The rows of rank `k`'s slice when a reduce-scatter splits `rows` among `n` ranks: ranks
/// below rows % n get one row more, as in Horovod.
constexpr std::int64_t slice_rows(std::int64_t rows, int n, int k) {
  return rows / n + (k < rows % n ? 1 : 0);
}

/// The slices of a reduce-scatter among `n` ranks, in elements per rank: the first
/// dimension split as Horovod does (ranks below rows % n get one row more). From the
/// round's agreed request, which holds its own copy of the shape.
std::vector<std::size_t> slices(const runtime::Request& r, int n);

/// Runs alltoall `a` among `g`: first every rank's splits and receive capacity travel to
/// every rank (all check every capacity alike, so a too-small buffer fails the collective
/// everywhere before data moves), then the rows. Throws runtime::Refused for a capacity
/// too small.
void alltoall(const Group& g, const Collective& a);

/// True when libhvdrun applies `c`'s prescale and postscale: a reduction (allreduce,
/// reducescatter) on host buffers whose caller did not say it applies them itself.
bool library_scales(const Collective& c);

/// Throws Error for scale factors libhvdrun cannot apply: on device buffers (no device
/// kernel yet) unless the caller applies them itself (Collective::caller_scales).
void check_scales(const Collective& c, const char* fn);

/// A collective with its prescale applied, as the transports move it: an allreduce's
/// input scaled into its output (then reduced in place), a reduce-scatter's into a buffer
/// of its own (`scratch`, held until the data has moved). `c` unchanged when libhvdrun
/// does not scale it or the prescale is 1.
struct Prescaled {
  Collective c;
  std::shared_ptr<std::vector<unsigned char>> scratch;
};
Prescaled prescaled(const Collective& c);

/// Applies `c`'s postscale to its output once the data has moved: `count` elements at
/// recv (this rank's slice for a reduce-scatter). Nothing when libhvdrun does not scale
/// `c` or the factor is 1.
void postscale(const Collective& c, std::size_t count);

}  // namespace hvdrun::semantics
