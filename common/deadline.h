// What is left of a deadline, for calls that take a timeout. time_left() is never zero or
// negative, so a deadline that has just passed still gives the callee one last, short try;
// ms_left() is zero once it has passed, for poll() loops that then look once and stop;
// poll_ms_left() is poll()'s timeout: rounded up, so a poll that times out has reached the
// deadline, and within int.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>

namespace hvdrun {

inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                       deadline - std::chrono::steady_clock::now()));
}

inline long long ms_left(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max<long long>(
      0, std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now())
             .count());
}

inline int poll_ms_left(std::chrono::steady_clock::time_point deadline) {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  return static_cast<int>(
      std::min<long long>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), INT_MAX));
}

}  // namespace hvdrun
