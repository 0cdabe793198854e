// PendingCap: beyond a limit, evict the oldest pending connection among those of the
// sources holding the most (pending_cap.h).
#include "common/pending_cap.h"

#include <algorithm>
#include <utility>

namespace hvdrun {

PendingCap::PendingCap(PendingLimits limits) : limits_(limits) {
  limits_.total = std::max<std::size_t>(limits_.total, 1);
  limits_.per_source = std::max<std::size_t>(limits_.per_source, 1);
}

PendingCap::Id PendingCap::add(const std::string& source, std::function<void()> evict) {
  const Id id = next_++;
  entries_.push_back(Entry{id, source, std::move(evict)});
  by_id_[id] = std::prev(entries_.end());
  const std::size_t mine = ++per_source_[source];
  if (mine > limits_.per_source) evict_one(oldest_from(source));
  while (entries_.size() > limits_.total) evict_one(victim_for(id));
  return id;
}

void PendingCap::remove(Id id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  auto entry = it->second;
  by_id_.erase(it);
  auto src = per_source_.find(entry->source);
  if (src != per_source_.end() && --src->second == 0) per_source_.erase(src);
  entries_.erase(entry);
}

std::size_t PendingCap::from(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

PendingCap::List::iterator PendingCap::oldest_from(const std::string& source) {
  return std::find_if(entries_.begin(), entries_.end(),
                      [&](const Entry& e) { return e.source == source; });
}

PendingCap::List::iterator PendingCap::victim_for(Id newcomer) {
  std::size_t most = 0;
  for (const auto& [source, count] : per_source_) most = std::max(most, count);
  // Oldest first, so that a tie among sources is settled by age, never by hash order.
  auto victim = std::find_if(entries_.begin(), entries_.end(),
                             [&](const Entry& e) { return per_source_.at(e.source) == most; });
  // The newcomer is the youngest entry, so an older one always holds as many as its
  // source or more, and this cannot happen while the total is at least 1: kept so that
  // the promise does not rest on that argument alone.
  if (victim == entries_.end() || victim->id == newcomer) victim = entries_.begin();
  return victim;
}

void PendingCap::evict_one(List::iterator it) {
  if (it == entries_.end()) return;
  auto evict = std::move(it->evict);
  remove(it->id);  // first: the callback may close the connection, which removes again
  ++evicted_;
  if (evict) evict();
}

}  // namespace hvdrun
