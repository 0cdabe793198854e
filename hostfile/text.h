// What the host-list parsers of hostfile/ share: the slot cap, the characters of a host
// name, and the case-insensitive form names are compared in.
#pragma once

#include <string>
#include <string_view>

namespace hvdrun::hostfile::text {

/// Slots per host are capped so that a typo (`node1:40000000`) fails while parsing rather
/// than as an out-of-memory later; no real host runs more ranks than this.
inline constexpr int kMaxSlots = 65536;

/// A character of a host name: letters, digits, '-', '.', '_'.
inline bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

/// `s` in ASCII lower case: host names are compared without case, as DNS does.
inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace hvdrun::hostfile::text
