// The cap on connections that have not yet shown they belong to the job (rendezvous:
// not authenticated; Horovod HTTP: no complete request header yet). A legitimate client
// passes that gate within a round trip, so beyond a cap older connections make room:
//
// - a source over its own cap loses its oldest pending connection;
// - over the total cap, the victim is the oldest pending connection among those of the
//   sources holding the most (walking pending connections oldest first, the first whose
//   source's count equals the maximum). Ties between sources are settled by age alone,
//   never by a container's order: 256 addresses holding one each cannot single out the
//   job's connection that arrived after them, only their own older ones;
// - the newcomer is never the one closed (were the rule ever to pick it, the oldest
//   pending connection overall would go instead).
//
// python/hvdrun/_preauth.py follows the same rule; both run the scenarios of
// tests/common/pending_cap_cases.txt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>

namespace hvdrun {

/// Limits of a PendingCap.
struct PendingLimits {
  /// Pending connections in all.
  std::size_t total = 256;
  /// Pending connections from one source address.
  std::size_t per_source = 64;
};

/// Tracks pending connections and, beyond the limits, evicts the oldest pending
/// connection among those of the sources holding the most (the rule above).
/// Single-threaded: used on a server's I/O thread.
class PendingCap {
 public:
  /// Identifies one tracked connection.
  using Id = std::uint64_t;

  /// Tracks nothing yet.
  explicit PendingCap(PendingLimits limits);

  /// Tracks a new pending connection from `source` (an address, no port). When that
  /// breaks the per-source limit, that source's oldest is evicted; while the total is
  /// broken, the oldest among those of the sources holding the most. Evicted ones are
  /// untracked and their `evict` called (never this one's). Returns the new one's id.
  Id add(const std::string& source, std::function<void()> evict);
  /// Stops tracking `id` (it passed the gate or closed); unknown ids are ignored.
  void remove(Id id);

  /// Pending connections now.
  std::size_t size() const { return entries_.size(); }
  /// Pending connections from `source` now.
  std::size_t from(const std::string& source) const;
  /// Connections evicted so far.
  std::uint64_t evicted() const { return evicted_; }
  /// The limits in force.
  const PendingLimits& limits() const { return limits_; }

 private:
  struct Entry {
    Id id;
    std::string source;
    std::function<void()> evict;
  };
  using List = std::list<Entry>;

  // The oldest entry from `source`, or end().
  List::iterator oldest_from(const std::string& source);
  // The entry to evict when the total is broken by `newcomer`'s arrival.
  List::iterator victim_for(Id newcomer);
  void evict_one(List::iterator it);

  PendingLimits limits_;
  List entries_;  // oldest first
  std::unordered_map<Id, List::iterator> by_id_;
  std::unordered_map<std::string, std::size_t> per_source_;
  Id next_ = 1;
  std::uint64_t evicted_ = 0;
};

}  // namespace hvdrun
