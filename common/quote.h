// Quoting user text inside a message, one way for every message of hvdrun.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hvdrun {

/// `s` in single quotes for an error message: tab, CR and LF as \t \r \n, other control
/// bytes and bytes that are not part of valid UTF-8 as \xNN, a backslash as \\ (so that
/// '\x07' always means that byte, never the four characters), UTF-8 characters whole, and
/// at most 80 characters shown (then "..."), so that a message stays on one line whatever
/// the input held and never ends in half a character.
std::string quote(std::string_view s);

/// Length (2 to 4) of the valid multi-byte UTF-8 sequence starting at s[i], or 0 when none
/// starts there (an ASCII byte, a stray continuation byte, an overlong or cut sequence).
/// `s` as a JSON string literal, in double quotes: '"' and '\\' escaped, LF, CR and tab as
/// \n \r \t, other control bytes as \u00XX; everything else (UTF-8 included) as is.
std::string json_quote(std::string_view s);

std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

}  // namespace hvdrun
