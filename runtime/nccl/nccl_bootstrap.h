// The NCCL communicator's bootstrap through the rendezvous store: the owners of the
// communicator's unique ids (rank 0, or with NCCL's scalable init one rank per 128) publish
// each id, or why they could not make it, and every rank waits for all of them. The ids are
// opaque bytes here, so this part needs neither CUDA nor NCCL and is tested over a
// MemoryStore (tests/runtime/nccl/nccl_bootstrap_test.cc).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace hvdrun::runtime {

/// Rank 0 runs `make_id` (which may throw) and publishes its result under `key`; every
/// other rank waits up to `timeout` for it. Returns the id bytes on every rank, or throws
/// Error on every rank with rank 0's reason or the timeout. Independent of CUDA, so it
/// is tested without a GPU.
std::string exchange_unique_id(rendezvous::Store& store, const std::string& key, int rank,
                               const std::function<std::string()>& make_id,
                               std::chrono::milliseconds timeout);

/// Ranks served by one NCCL unique id under ncclCommInitRankScalable (NCCL >= 2.23):
/// each id's owner runs one bootstrap root, so no single rank answers every other one.
inline constexpr int kNcclRanksPerId = 128;

/// How many unique ids a communicator of `size` ranks uses: one per `ranks_per_id`
/// ranks, rounded up, at least one (size <= 0 counts as one rank).
int nccl_id_count(int size, int ranks_per_id = kNcclRanksPerId);

/// The rank that generates id `index` of `count` for a communicator of `size` ranks:
/// floor(index * size / count), so the owners are spread evenly over the ranks and, as
/// ranks fill hosts in order, over the hosts (distinct hosts while hosts >= count).
int nccl_id_owner(int index, int size, int count);

/// Which id `rank` generates (the inverse of nccl_id_owner), or -1 when it makes none.
int nccl_id_index(int rank, int size, int count);

/// Key of id `index` under `key`: `key` itself for id 0 (what exchange_unique_id uses),
/// `key/<index>` for the others.
std::string nccl_id_key(const std::string& key, int index);

/// The multi-id exchange: each owner (nccl_id_owner) runs `make_id` and publishes the
/// result or its failure under nccl_id_key(key, i); every rank waits up to `timeout` for
/// all `count` of them. Returns the ids in order on every rank, or throws Error naming
/// the owner that failed or did not publish. With count == 1 this is exchange_unique_id.
std::vector<std::string> exchange_unique_ids(rendezvous::Store& store, const std::string& key,
                                             int rank, int size, int count,
                                             const std::function<std::string()>& make_id,
                                             std::chrono::milliseconds timeout);

}  // namespace hvdrun::runtime
