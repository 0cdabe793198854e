// A list of ranks as --ranks-filter and --local-ranks-filter take it: ranks and ranges
// ("0,3-5").
#pragma once

#include <string>
#include <vector>

namespace hvdrun::cli {

/// The ranks of `text`, ascending and without repeats. Throws UsageError naming `flag` for
/// anything else (a word, a range that runs backwards, one too wide).
std::vector<int> parse_rank_list(const std::string& text, const char* flag);

}  // namespace hvdrun::cli
