// Backoff: jittered exponential pauses between connection attempts (backoff.h).
#include "common/backoff.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/deadline.h"

namespace hvdrun {

Backoff::Backoff(BackoffPolicy policy, Clock::time_point deadline)
    : policy_(policy),
      deadline_(deadline),
      delay_(std::max(policy.initial, std::chrono::milliseconds(1))),
      rng_(std::random_device{}() ^ static_cast<unsigned>(::getpid())) {
  policy_.attempts = std::max(policy_.attempts, 1);
  policy_.max = std::max(policy_.max, delay_);
}

std::optional<std::chrono::milliseconds> Backoff::next() {
  ++failed_;
  if (failed_ >= policy_.attempts || Clock::now() >= deadline_) return std::nullopt;
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  const auto pause = std::min<long long>(
      std::llround(static_cast<double>(delay_.count()) * jitter(rng_)), ms_left(deadline_));
  if (pause <= 0) return std::nullopt;
  delay_ = std::min(delay_ * 2, policy_.max);
  return std::chrono::milliseconds(pause);
}

}  // namespace hvdrun
