// --ranks-filter's and --local-ranks-filter's lists (rank_list.h).
#include "cli/rank_list.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/quote.h"

namespace hvdrun::cli {

std::vector<int> parse_rank_list(const std::string& text, const char* flag) {
  const auto bad = [&](const std::string& why) {
    return UsageError("bad value " + quote(text) + " for " + flag + ": " + why +
                      "; expected ranks and ranges such as 0,3-5");
  };
  constexpr long kMaxRank = 1 << 24;
  const auto number = [&](std::string_view digits) {
    if (digits.empty() || digits.size() > 8 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      throw bad(quote(std::string(digits)) + " is not a rank");
    return std::stol(std::string(digits));
  };
  std::vector<int> ranks;
  std::string_view rest(text);
  while (true) {
    const std::string_view item = rest.substr(0, rest.find(','));
    const auto dash = item.find('-');
    const long first = number(item.substr(0, dash));
    const long last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
    if (last < first) throw bad(quote(std::string(item)) + " runs backwards");
    if (last - first >= kMaxRank) throw bad(quote(std::string(item)) + " is too wide");
    for (long r = first; r <= last; ++r) ranks.push_back(static_cast<int>(r));
    if (item.size() == rest.size()) break;
    rest.remove_prefix(item.size() + 1);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace hvdrun::cli
