// The one strict parser of whole numbers in user input (flags, their values): digits only,
// no sign, no spaces, no suffix, so `-np 4x` is an error rather than 4.
#pragma once

#include <optional>
#include <string_view>

namespace hvdrun {

/// `text` as a whole number in [lo, hi]: digits only (at most 9), no sign, no spaces, no
/// suffix; nullopt otherwise.
inline std::optional<long> parse_whole_number(std::string_view text, long lo, long hi) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace hvdrun
