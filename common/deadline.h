// What is left of a deadline, for calls that take a timeout: never zero or negative, so a
// deadline that has just passed still gives the callee one last, short try.
#pragma once

#include <algorithm>
#include <chrono>

namespace hvdrun {

inline std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                       deadline - std::chrono::steady_clock::now()));
}

}  // namespace hvdrun
