// A count with its noun, as messages print it: "1 rank", "2 ranks", "0 slots". One home for
// the rule, so that no message says "1 ranks".
#pragma once

#include <string>
#include <string_view>

namespace hvdrun {

/// `n` and `noun` (singular, made plural with "s"): counted(1, "rank") is "1 rank",
/// counted(3, "host") is "3 hosts".
inline std::string counted(long long n, std::string_view noun) {
  return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

}  // namespace hvdrun
