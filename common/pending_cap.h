// The cap on connections that have not yet shown they belong to the job (rendezvous:
// not authenticated; Horovod HTTP: no complete request header yet). A legitimate client
// passes that gate within a round trip, so when the cap is reached the oldest pending
// connection of the source holding the most is closed, never the newcomer: a flood of
// silent connections can no longer keep the job's own ranks out, only itself.
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

/// Tracks pending connections and evicts the oldest of the heaviest source beyond the
/// limits. Single-threaded: used on a server's I/O thread.
class PendingCap {
 public:
  /// Identifies one tracked connection.
  using Id = std::uint64_t;

  /// Tracks nothing yet.
  explicit PendingCap(PendingLimits limits);

  /// Tracks a new pending connection from `source` (an address, no port). When that
  /// breaks a limit, older pending connections are untracked and their `evict` called
  /// (never this one's). Returns the new connection's id.
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
  void evict_one(List::iterator it);

  PendingLimits limits_;
  List entries_;  // oldest first
  std::unordered_map<Id, List::iterator> by_id_;
  std::unordered_map<std::string, std::size_t> per_source_;
  Id next_ = 1;
  std::uint64_t evicted_ = 0;
};

}  // namespace hvdrun
