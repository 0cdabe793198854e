// The public API's process sets (hvdrun/hvdrun.h): added and removed by every rank at the
// same point of the agreed order; each member gets its own engine and communicators.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "hvdrun/hvdrun.h"
#include "rendezvous/store.h"
#include "runtime/api/api_state.h"
#include "runtime/core/timeline.h"
#include "runtime/engine/engine.h"
#include "runtime/semantics/semantics.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace hvdrun {

using api_detail::joined;
using api_detail::stall_policy;
using api_detail::timeline;

namespace {

std::uint64_t fnv(const void* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<const unsigned char*>(data)[i];
    h *= 1099511628211ULL;
  }
  return h;
}

// Every rank's value of `mine` (fixed size), gathered over the whole job through its
// engine: process sets are added and removed at the same point of the agreed order on
// every rank.
template <typename T>
std::vector<T> gather_all(const T& mine) {
  std::vector<T> all(static_cast<std::size_t>(size()));
  allgather(&mine, all.data(), sizeof(T), DataType::kUInt8);
  return all;
}

runtime::Engine::Hooks set_hooks(runtime::ProcessSet* s) {
  runtime::Engine::Hooks h;
  h.exchange = [s](const void* mine, std::size_t used, void* all, std::size_t bytes,
                   const runtime::Request*) { s->host->allgather_upto(mine, used, all, bytes); };
  if (s->host->moves_used_bytes()) h.inline_limit = runtime::kInlineBytesLocal;
  h.stand_in = [](const runtime::Ready&) {};  // join() is the job's: sets see no joined ranks
  h.timeline = &timeline();
  h.stall = [id = s->id](const std::string& text, bool) {
    hvdrun::log().warn("{} (process set {})", text, id);
  };
  return h;
}

}  // namespace

int add_process_set(const std::vector<int>& ranks_in) {
  auto j = joined("add_process_set");
  const auto& env = j->world->env();
  std::vector<int> ranks = ranks_in;
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) throw Error("hvdrun::add_process_set: a process set needs at least one rank");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= env.size)
      throw Error("hvdrun::add_process_set: rank " + std::to_string(ranks[i]) +
                  " is not a rank of this job (size " + std::to_string(env.size) + ")");
    if (i > 0 && ranks[i] == ranks[i - 1])
      throw Error("hvdrun::add_process_set: rank " + std::to_string(ranks[i]) + " is listed twice");
  }
  // Every rank must add the same set; each learns where every rank runs.
  struct Entry {
    std::uint64_t list;
    std::uint64_t host;
  };
  const auto all = gather_all(Entry{fnv(ranks.data(), ranks.size() * sizeof(int)),
                                    fnv(env.hostname.data(), env.hostname.size())});
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].list != all[0].list)
      throw Error("hvdrun::add_process_set: rank " + std::to_string(r) +
                  " added a different set than rank 0 (this rank: ranks " +
                  runtime::ranks_text(ranks) +
                  "); every rank must add the same sets in the "
                  "same order");
  auto set = std::make_shared<runtime::ProcessSet>();
  set->ranks = ranks;
  {
    std::lock_guard lock(j->sets_mu);
    // Every rank of the job is the global set's (0), as in Horovod.
    if (ranks.size() == static_cast<std::size_t>(env.size)) throw DuplicateProcessSet(0, ranks);
    for (const auto& [id, other] : j->sets)
      if (other->ranks == ranks) throw DuplicateProcessSet(id, ranks);
    set->id = j->next_set++;
  }
  const auto at = std::find(ranks.begin(), ranks.end(), env.rank);
  if (at != ranks.end()) {
    set->rank = static_cast<int>(at - ranks.begin());
    std::vector<std::uint64_t> hosts;
    for (const auto& e : all) hosts.push_back(e.host);
    set->env = runtime::set_environment(env, ranks, hosts);
    set->prefix = (rendezvous::Key(j->world->prefix()) / "ps" / set->id).str();
    set->host = j->world->subset_host(set->env, set->prefix);
    set->engine =
        std::make_unique<runtime::Engine>(set_hooks(set.get()), set->env.size, stall_policy(env));
  }
  std::lock_guard lock(j->sets_mu);
  j->sets.emplace(set->id, set);
  return set->id;
}

bool remove_process_set(int id) {
  auto j = joined("remove_process_set");
  const auto all = gather_all(static_cast<std::int64_t>(id));
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0])
      throw Error("hvdrun::remove_process_set: rank " + std::to_string(r) + " removed set " +
                  std::to_string(all[r]) + ", rank 0 set " + std::to_string(all[0]) +
                  "; every rank must remove the same sets in the same order");
  std::shared_ptr<runtime::ProcessSet> set;
  {
    std::lock_guard lock(j->sets_mu);
    auto it = j->sets.find(id);
    if (it == j->sets.end()) return false;
    set = it->second;
    j->sets.erase(it);
  }
  if (set->engine) {
    // What the members still agree on runs; then the set's communicators close.
    const bool healthy = set->engine->shutdown();
    set->engine->stop();
    if (healthy) set->host->farewell(std::chrono::seconds(10));
  }
  return true;
}

std::vector<int> process_set_ranks(int id) {
  auto j = joined("process_set_ranks");
  if (id == 0) {
    std::vector<int> all(static_cast<std::size_t>(j->world->env().size));
    for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
    return all;
  }
  std::lock_guard lock(j->sets_mu);
  auto it = j->sets.find(id);
  if (it == j->sets.end())
    throw InvalidArgument("hvdrun::process_set_ranks: process set " + std::to_string(id) +
                          " does not exist (never added, or removed); add it with "
                          "add_process_set() on every rank first");
  return it->second->ranks;
}

std::int64_t reducescatter_rows(std::int64_t rows, int process_set) {
  if (rows < 0)
    throw InvalidArgument("hvdrun::reducescatter_rows: " + std::to_string(rows) +
                          " rows; a first dimension cannot be negative");
  const auto ranks = process_set_ranks(process_set);
  const int me = joined("reducescatter_rows")->world->env().rank;
  const auto it = std::find(ranks.begin(), ranks.end(), me);
  if (it == ranks.end())
    throw InvalidArgument("hvdrun::reducescatter_rows: this rank (" + std::to_string(me) +
                          ") is not in process set " + std::to_string(process_set) + " (ranks " +
                          runtime::ranks_text(ranks) + "); only its members reduce-scatter in it");
  return semantics::slice_rows(rows, static_cast<int>(ranks.size()),
                               static_cast<int>(it - ranks.begin()));
}

DuplicateProcessSet::DuplicateProcessSet(int existing, const std::vector<int>& ranks)
    : Error(existing == 0 ? "hvdrun::add_process_set: ranks " + runtime::ranks_text(ranks) +
                                " are every rank of the job, the global process set (0); "
                                "use it (process set 0)"
                          : "hvdrun::add_process_set: process set " + std::to_string(existing) +
                                " already has ranks " + runtime::ranks_text(ranks) +
                                "; use it, or remove it first"),
      existing_(existing) {}
DuplicateProcessSet::~DuplicateProcessSet() = default;

}  // namespace hvdrun
