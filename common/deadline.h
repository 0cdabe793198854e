// What is left of a deadline, for calls that take a timeout. left_until() is the whole
// duration, zero once the deadline has passed, for a wait split in slices or shares and for
// sleeps; time_left() is never zero or negative, so a deadline that has just passed still
// gives the callee one last, short try; ms_left() is zero once it has passed, for poll()
// loops that then look once and stop; poll_ms_left() is poll()'s timeout: rounded up, so a
// poll that times out has reached the deadline, and within int.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>

namespace hvdrun {

inline std::chrono::steady_clock::duration left_until(
    std::chrono::steady_clock::time_point deadline) {
  return std::max(std::chrono::steady_clock::duration::zero(),
                  deadline - std::chrono::steady_clock::now());
}

inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(left_until(deadline)));
}

inline long long ms_left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(left_until(deadline)).count();
}

inline int poll_ms_left(std::chrono::steady_clock::time_point deadline) {
  return static_cast<int>(std::min<long long>(
      std::chrono::ceil<std::chrono::milliseconds>(left_until(deadline)).count(), INT_MAX));
}

}  // namespace hvdrun
