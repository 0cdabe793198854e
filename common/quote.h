// Quoting user text inside a message, one way for every message of hvdrun.
#pragma once

#include <string>
#include <string_view>

namespace hvdrun {

/// `s` in single quotes for an error message: tab, CR and LF as \t \r \n, other control
/// bytes as \xNN, and at most 80 characters shown (then "..."), so that a message stays on
/// one line whatever the input held.
std::string quote(std::string_view s);

}  // namespace hvdrun
