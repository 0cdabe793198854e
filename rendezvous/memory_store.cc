// MemoryStore (see memory_store.h) and the key list shared by the stores' messages.
#include "rendezvous/memory_store.h"

#include <charconv>

namespace hvdrun::rendezvous {

std::string key_list(const std::vector<std::string>& keys) {
  std::string list;
  for (std::size_t i = 0; i < keys.size() && i < 16; ++i) list += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 16) list += " and " + std::to_string(keys.size() - 16) + " more";
  return list;
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
}

void MemoryStore::multi_set(const std::vector<std::pair<std::string, std::string>>& items) {
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, value] : items) data_[key] = value;
  }
  changed_.notify_all();
}

std::optional<std::string> MemoryStore::get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::optional<std::string>> MemoryStore::multi_get(
    const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const auto& key : keys) {
    auto it = data_.find(key);
    out.push_back(it == data_.end() ? std::nullopt : std::optional<std::string>(it->second));
  }
  return out;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard lock(mu_);
    std::string& stored = data_[key];
    if (!stored.empty()) {
      auto [p, ec] = std::from_chars(stored.data(), stored.data() + stored.size(), value);
      if (ec != std::errc() || p != stored.data() + stored.size()) {
        throw Error("add: key '" + key + "' holds '" + stored + "', not an integer");
      }
    }
    value += delta;
    stored = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

bool MemoryStore::erase(const std::string& key) {
  std::lock_guard lock(mu_);
  return data_.erase(key) > 0;
}

std::vector<std::string> MemoryStore::missing_locked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (!data_.count(key)) missing.push_back(key);
  }
  return missing;
}

std::vector<std::string> MemoryStore::wait_for(const std::vector<std::string>& keys,
                                               std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock lock(mu_);
  changed_.wait_until(lock, deadline, [&] { return missing_locked(keys).empty(); });
  return missing_locked(keys);
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                       const std::string& what) {
  auto missing = wait_for(keys, timeout);
  if (missing.empty()) return;
  const std::string list = key_list(missing);  // before `missing` is moved from
  throw TimeoutError((what.empty() ? std::string("wait") : what) + ": " + list +
                         " did not appear within " + std::to_string(timeout.count()) +
                         " ms (in-memory store)",
                     std::move(missing));
}

std::size_t MemoryStore::size() const {
  std::lock_guard lock(mu_);
  return data_.size();
}

}  // namespace hvdrun::rendezvous
