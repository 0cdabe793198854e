// The key-value store ranks use to find each other, as an interface: the rendezvous
// Client is the real one (TCP to the launcher's server, authenticated); MemoryStore
// (memory_store.h) is an in-process one, so that runtime code built on the store can be
// tested without a server. Errors are the ones every store throws.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"

namespace hvdrun::rendezvous {

/// A rendezvous failure: could not connect, authentication rejected, connection lost,
/// protocol violation. The message names the server address and the operation.
class Error : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

/// A wait whose deadline passed; `missing()` lists the keys that never appeared.
class TimeoutError : public Error {
 public:
  /// `message` is complete; `missing` the keys still absent at the deadline.
  TimeoutError(const std::string& message, std::vector<std::string> missing)
      : Error(message), missing_(std::move(missing)) {}
  /// Keys that were still absent at the deadline.
  const std::vector<std::string>& missing() const { return missing_; }

 private:
  std::vector<std::string> missing_;
};

/// A key-value store with blocking waits. Keys are namespaced by their users
/// (communicator name and generation).
class Store {
 public:
  virtual ~Store() = default;

  /// Stores `value` under `key`, waking waiters.
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// Stores several keys at once (waiters see all of them at once).
  virtual void multi_set(const std::vector<std::pair<std::string, std::string>>& items) = 0;
  /// The value of `key` now, or nullopt.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  /// The values of `keys` now (nullopt where absent), in order.
  virtual std::vector<std::optional<std::string>> multi_get(
      const std::vector<std::string>& keys) = 0;
  /// Adds `delta` to the integer under `key` (absent = 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  /// Removes `key`; true when it existed.
  virtual bool erase(const std::string& key) = 0;
  /// Blocks until every key exists or `timeout` passes. Returns the keys still missing
  /// (empty on success).
  virtual std::vector<std::string> wait_for(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) = 0;
  /// As wait_for, but throws TimeoutError naming `what` and the missing keys on timeout.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                    const std::string& what = {}) = 0;
};

/// Store::wait_for, in slices of at most 200 ms while `failure_key` is not empty: between
/// slices, a peer that failed and published why under `failure_key` (before it could
/// publish what the caller waits for) ends the wait with `failed(why)`, which throws,
/// instead of the whole `timeout`. Returns the keys still missing.
template <typename Failed>
std::vector<std::string> wait_for_unless_failed(Store& store, const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout,
                                                const std::string& failure_key, Failed failed) {
  if (failure_key.empty()) return store.wait_for(keys, timeout);
  constexpr std::chrono::milliseconds kSlice(200);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const std::chrono::milliseconds left = time_left(deadline);
    auto missing = store.wait_for(keys, std::min(left, kSlice));
    if (missing.empty() || left <= kSlice) return missing;
    if (auto why = store.get(failure_key)) failed(*why);
  }
}

/// A store key built from parts, so that a namespace is spelled once and its keys are
/// joined one way: `Key("hvdrun/g0") / "hosts" / 3` is "hvdrun/g0/hosts/3". Passes as
/// the key string itself to every Store call.
class Key {
 public:
  /// The key (or namespace) `path`, as given.
  explicit Key(std::string path) : path_(std::move(path)) {}
  /// `path/part`.
  Key operator/(std::string_view part) const {
    std::string p = path_;
    p += '/';
    p += part;
    return Key(std::move(p));
  }
  /// `path/index`, the index in decimal.
  Key operator/(int index) const { return *this / std::string_view(std::to_string(index)); }
  /// `path/0` ... `path/(n-1)`: one key per rank or host under this namespace.
  std::vector<std::string> range(int n) const {
    std::vector<std::string> keys;
    keys.reserve(n > 0 ? static_cast<std::size_t>(n) : 0);
    for (int i = 0; i < n; ++i) keys.push_back((*this / i).str());
    return keys;
  }
  /// The key text.
  const std::string& str() const { return path_; }
  // Implicit, so that a Key is passed wherever a Store takes a key.
  operator const std::string&() const { return path_; }  // NOLINT(google-explicit-constructor)

 private:
  std::string path_;
};

/// "'a', 'b' and 3 more": at most 16 keys, for timeout messages.
std::string key_list(const std::vector<std::string>& keys);

}  // namespace hvdrun::rendezvous
