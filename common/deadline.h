// What is left of a deadline, for calls that take a timeout. time_left() is never zero or
// negative, so a deadline that has just passed still gives the callee one last, short try;
// ms_left() is zero once it has passed, for poll() loops that then look once and stop.
#pragma once

#include <algorithm>
#include <chrono>

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

}  // namespace hvdrun
