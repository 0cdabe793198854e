// The ranks a collective runs among, and the collectives' splits decided in one place:
// an alltoall's splits (checked at submission, then exchanged before the rows) and a
// reduce-scatter's row split, shared by the files of the public API. Internal: not part
// of the installed headers.
#pragma once

#include <cstddef>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/engine/engine.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace hvdrun::api_detail {

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

/// The slices of a reduce-scatter among `n` ranks, in elements per rank: the first
/// dimension split as Horovod does (ranks below rows % n get one row more). From the
/// round's agreed request, which holds its own copy of the shape.
std::vector<std::size_t> slices(const runtime::Request& r, int n);

/// Runs alltoall `a` among `g`: first every rank's splits and receive capacity travel to
/// every rank (all check every capacity alike, so a too-small buffer fails the collective
/// everywhere before data moves), then the rows. Throws runtime::Refused for a capacity
/// too small.
void alltoall(const Group& g, const Collective& a);

}  // namespace hvdrun::api_detail
