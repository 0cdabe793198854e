// The rendezvous client every rank uses: blocking calls over one authenticated TCP
// connection, each with a deadline. Connect retries with jittered exponential backoff.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"

namespace hvdrun::rendezvous {

/// How to reach the server and how patiently.
struct ClientOptions {
  /// Server host name or IP literal.
  std::string host;
  /// Server port.
  std::uint16_t port = 0;
  /// The per-job secret (the HVDRUN_SECRET string).
  std::string secret;
  /// Overall deadline for connecting, retries included.
  std::chrono::milliseconds connect_timeout{30000};
  /// Attempts before giving up (also bounded by connect_timeout).
  int max_attempts = 30;
  /// First retry delay; doubles per attempt up to backoff_max, each with +-50 % jitter.
  std::chrono::milliseconds backoff_initial{50};
  /// Largest retry delay.
  std::chrono::milliseconds backoff_max{2000};
  /// Deadline of each call other than wait().
  std::chrono::milliseconds call_timeout{30000};
  /// Who is connecting, for error messages ("rank 3").
  std::string who;
};

/// One authenticated connection to the rendezvous server: the real Store. Not
/// thread-safe: one call at a time (callers serialise).
class Client : public Store {
 public:
  /// Connects and authenticates, retrying under the connect deadline.
  /// Throws Error naming the address and the last failure.
  explicit Client(ClientOptions options);
  ~Client() override;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Stores `value` under `key`, waking waiters.
  void set(const std::string& key, const std::string& value) override;
  /// Stores several keys in one round trip (waiters see all of them at once).
  void multi_set(const std::vector<std::pair<std::string, std::string>>& items) override;
  /// The value of `key` now, or nullopt.
  std::optional<std::string> get(const std::string& key) override;
  /// The values of `keys` now (nullopt where absent), in order.
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  /// Adds `delta` to the integer under `key` (absent = 0) and returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  /// Removes `key`; true when it existed.
  bool erase(const std::string& key) override;
  /// Blocks until every key exists or `timeout` passes (deadline kept by the server).
  /// Returns the keys still missing (empty on success).
  std::vector<std::string> wait_for(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  /// As wait_for, but throws TimeoutError saying "<what>: ... missing <keys>" on timeout.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            const std::string& what = {}) override;
  /// Round trip without effect.
  void ping();

  /// Local IP address of this connection (getsockname): the address on which this host
  /// reaches the server, so the right one for a rank's own collective traffic.
  const std::string& local_address() const;
  /// "host:port" of the server, for messages.
  const std::string& server_address() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::rendezvous
