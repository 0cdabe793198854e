// PendingCap against the scenarios of tests/common/pending_cap_cases.txt, which
// tests/python/test_pending_cap.py runs against python/hvdrun/_preauth.py as well: beyond
// its limits the cap closes a source's own oldest, or the oldest pending connection among
// those of the sources holding the most, never the newcomer. The file's head describes
// its format; every step is checked, and a failure names the file's line.
#include "common/pending_cap.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using hvdrun::PendingCap;

namespace {

const std::string kCases = HVDRUN_SOURCE_DIR "/tests/common/pending_cap_cases.txt";

struct Step {
  std::string where;  // file:line
  std::vector<std::string> words;
};

struct Case {
  std::string name;
  std::string where;
  std::optional<hvdrun::PendingLimits> limits;
  std::vector<Step> steps;
};

std::vector<Case> parse(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<Case> cases;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string where = path + ":" + std::to_string(number);
    std::istringstream words(line.substr(0, line.find('#')));
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    if (w[0] == "case") {
      cases.push_back(Case{line.substr(line.find("case") + 5), where, std::nullopt, {}});
      continue;
    }
    INFO(where);
    REQUIRE(!cases.empty());
    if (w[0] == "limits") {
      REQUIRE(w.size() == 3);
      cases.back().limits = hvdrun::PendingLimits{std::stoul(w[1]), std::stoul(w[2])};
    } else {
      cases.back().steps.push_back(Step{where, w});
    }
  }
  return cases;
}

// "p[3..9]" as ("p", 3, 9); nullopt for a word without a range.
struct Range {
  std::string prefix;
  int first, last;
};
std::optional<Range> range_of(const std::string& word) {
  const auto open = word.find('['), dots = word.find("..");
  if (open == std::string::npos || dots == std::string::npos || word.back() != ']')
    return std::nullopt;
  return Range{word.substr(0, open), std::stoi(word.substr(open + 1, dots - open - 1)),
               std::stoi(word.substr(dots + 2, word.size() - dots - 3))};
}

// An add step as (source, the arrivals it must evict), its range written out.
std::vector<std::pair<std::string, std::vector<int>>> arrivals(const Step& s) {
  INFO(s.where << ": add SOURCE [evicts N ...], or add P[A..B] [evicts [C..D]]");
  const auto& w = s.words;
  REQUIRE(w.size() >= 2);
  REQUIRE((w.size() == 2 || w[2] == "evicts"));
  std::vector<int> victims;
  for (std::size_t i = 3; i < w.size(); ++i)
    if (!range_of(w[i])) victims.push_back(std::stoi(w[i]));
  const auto from = range_of(w[1]);
  if (!from) return {{w[1], victims}};
  std::optional<Range> evicts;
  if (w.size() > 2) {
    REQUIRE(w.size() == 4);
    evicts = range_of(w[3]);
    REQUIRE((evicts && evicts->prefix.empty()));
    REQUIRE(evicts->last - evicts->first == from->last - from->first);
  }
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (int i = from->first; i <= from->last; ++i) {
    std::vector<int> v;
    if (evicts) v.push_back(evicts->first + (i - from->first));
    out.emplace_back(from->prefix + std::to_string(i), v);
  }
  return out;
}

void run(const Case& c) {
  INFO("case at " << c.where << ": " << c.name);
  REQUIRE(c.limits);
  PendingCap cap(*c.limits);
  std::vector<PendingCap::Id> ids;  // arrival - 1 -> the cap's id
  std::vector<int> evicted;
  for (const Step& s : c.steps) {
    INFO(s.where);
    const auto& w = s.words;
    if (w[0] == "add") {
      for (const auto& [source, want] : arrivals(s)) {
        evicted.clear();
        const int arrival = static_cast<int>(ids.size()) + 1;
        INFO("arrival " << arrival << " from " << source);
        ids.push_back(cap.add(source, [&evicted, arrival] { evicted.push_back(arrival); }));
        REQUIRE(evicted == want);
      }
    } else if (w[0] == "remove" && w.size() == 2) {
      evicted.clear();
      const auto arrival = std::stoul(w[1]);
      cap.remove(arrival >= 1 && arrival <= ids.size()
                     ? ids[arrival - 1]
                     : std::numeric_limits<PendingCap::Id>::max());
      CHECK(evicted.empty());
    } else if (w[0] == "pending" && w.size() == 2) {
      CHECK(cap.size() == std::stoul(w[1]));
    } else if (w[0] == "from" && w.size() == 3) {
      CHECK(cap.from(w[1]) == std::stoul(w[2]));
    } else if (w[0] == "evicted" && w.size() == 2) {
      CHECK(cap.evicted() == std::stoul(w[1]));
    } else {
      FAIL("a step this test does not know: " << w[0]);
    }
  }
}

}  // namespace

TEST_CASE("pending cap: the scenarios of pending_cap_cases.txt, each step as it states",
          "[common][security]") {
  const auto cases = parse(kCases);
  std::set<std::string> names;
  for (const auto& c : cases) names.insert(c.name);
  CHECK(names.size() == cases.size());
  CHECK(cases.size() >= 10);
  // A section each: a case that fails stops there, and the others still run.
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) { run(c); }
  }
}
