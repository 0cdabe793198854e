// The rendezvous server's key-value store, kept on the server's I/O thread: the keys and
// their byte budget, the connections waiting on keys that are absent, and the answer to
// every request but a wait (a wait belongs to its connection, rendezvous/server.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/protocol.h"

namespace hvdrun::rendezvous {

/// A connection waiting on keys of the store.
class KeyWaiter {
 public:
  /// A key registered with `wait_id` (ServerStore::wait_for) was set.
  virtual void key_arrived(std::uint64_t wait_id) = 0;

 protected:
  KeyWaiter() = default;
  ~KeyWaiter() = default;
  KeyWaiter(const KeyWaiter&) = default;
  KeyWaiter& operator=(const KeyWaiter&) = default;
  KeyWaiter(KeyWaiter&&) = default;
  KeyWaiter& operator=(KeyWaiter&&) = default;
};

/// The keys of one server (not thread-safe: the server's I/O thread alone uses it).
class ServerStore {
 public:
  /// A store whose keys, values and kStoreEntryOverhead per key stay within `max_bytes`.
  explicit ServerStore(std::size_t max_bytes) : max_bytes_(max_bytes) {}

  /// The value of `key`, or nullopt.
  std::optional<std::string> get(const std::string& key) const;
  /// Whether `key` is set.
  bool contains(const std::string& key) const { return entries_.count(key) != 0; }
  /// Sets `key` (beyond the budget too: the launcher's own writes); wakes its waiters when
  /// the key is new.
  void set(const std::string& key, std::string value);
  /// Bytes of the budget in use.
  std::size_t bytes() const { return bytes_; }

  /// Has `waiter` told once `key` (absent now) is set, with `wait_id`.
  void wait_for(const std::string& key, std::weak_ptr<KeyWaiter> waiter, std::uint64_t wait_id);
  /// Forgets every waiter (the server stops).
  void clear_waiters() { waiters_.clear(); }

  /// The answer to `request` (any operation but Op::kWait), its values moved into the
  /// store. A write beyond the budget is refused with kBadRequest naming it.
  Response apply(Request& request);

 private:
  bool put(const std::string& key, std::string value);
  void erase(const std::string& key, std::int64_t& existed);
  std::size_t bytes_after(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values) const;
  bool within_budget(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                     Response& r) const;
  void add(Request& request, Response& r);
  void notify(const std::string& key);

  struct Waiter {
    std::weak_ptr<KeyWaiter> waiter;
    std::uint64_t wait_id;
  };
  std::unordered_map<std::string, std::string> entries_;
  std::unordered_map<std::string, std::vector<Waiter>> waiters_;
  std::size_t bytes_ = 0;
  std::size_t max_bytes_;
};

}  // namespace hvdrun::rendezvous
