// The pauses between a dialler's connection attempts: exponential, with +-50 % jitter so
// that ranks started together do not retry in step, bounded by a number of attempts and
// by the caller's deadline. The rendezvous client and the host leaders' frame mesh share
// it, so every connect retry in hvdrun backs off alike and logs "retrying (n/N) after X ms".
#pragma once

#include <chrono>
#include <optional>
#include <random>

namespace hvdrun {

/// How patiently a dialler retries.
struct BackoffPolicy {
  /// Attempts in all, the first included (at least 1).
  int attempts = 30;
  /// Pause after the first failed attempt; doubles after each, up to `max`.
  std::chrono::milliseconds initial{50};
  /// Largest pause.
  std::chrono::milliseconds max{2000};
};

/// The retries of one connection under one deadline. Not thread-safe.
class Backoff {
 public:
  using Clock = std::chrono::steady_clock;

  /// Retries under `policy` until `deadline`.
  Backoff(BackoffPolicy policy, Clock::time_point deadline);

  /// Called after a failed attempt: the pause before the next one (jittered, never past
  /// the deadline), or nullopt when the attempts or the time are spent.
  std::optional<std::chrono::milliseconds> next();
  /// Attempts failed so far (the n of "retrying (n/N)").
  int failed() const { return failed_; }
  /// Retries at most (the N of "retrying (n/N)").
  int retries() const { return policy_.attempts - 1; }
  /// Attempts allowed in all.
  int attempts() const { return policy_.attempts; }

 private:
  BackoffPolicy policy_;
  Clock::time_point deadline_;
  std::chrono::milliseconds delay_;
  int failed_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace hvdrun
