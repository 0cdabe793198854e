// An in-process Store: one map under a mutex, waits on a condition variable. Threads
// standing in for ranks share one instance; runtime tests use it instead of a server.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "rendezvous/store.h"

namespace hvdrun::rendezvous {

/// A thread-safe Store in memory.
class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  void multi_set(const std::vector<std::pair<std::string, std::string>>& items) override;
  std::optional<std::string> get(const std::string& key) override;
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool erase(const std::string& key) override;
  std::vector<std::string> wait_for(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            const std::string& what = {}) override;

  /// Number of keys stored now.
  std::size_t size() const;

 private:
  std::vector<std::string> missing_locked(const std::vector<std::string>& keys) const;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

}  // namespace hvdrun::rendezvous
