// quote(): see quote.h.
#include "common/quote.h"

#include <cstddef>

namespace hvdrun {

std::string quote(std::string_view s) {
  constexpr std::size_t kMaxShown = 80;
  std::string out = "'";
  std::size_t shown = 0;
  for (char ch : s) {
    if (shown == kMaxShown) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(ch);
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
    ++shown;
  }
  out += "'";
  return out;
}

}  // namespace hvdrun
