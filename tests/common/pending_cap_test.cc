// PendingCap: beyond its limits it closes the oldest pending connection of the source
// holding the most, never the newcomer.
#include "common/pending_cap.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

using hvdrun::PendingCap;

TEST_CASE("pending cap: a source over its share loses its oldest, others keep theirs",
          "[common][security]") {
  PendingCap cap({/*total=*/8, /*per_source=*/3});
  std::vector<std::string> closed;
  auto add = [&](const std::string& src, const std::string& name) {
    return cap.add(src, [&closed, name] { closed.push_back(name); });
  };
  add("10.0.0.2", "rank");
  add("10.0.0.9", "a1");
  add("10.0.0.9", "a2");
  add("10.0.0.9", "a3");
  CHECK(closed.empty());
  add("10.0.0.9", "a4");  // the attacker's fourth: its own oldest goes
  CHECK(closed == std::vector<std::string>{"a1"});
  CHECK(cap.from("10.0.0.9") == 3);
  CHECK(cap.from("10.0.0.2") == 1);
  CHECK(cap.evicted() == 1);
}

TEST_CASE("pending cap: over the total, the heaviest source pays, and removed ones are gone",
          "[common][security]") {
  PendingCap cap({/*total=*/4, /*per_source=*/4});
  std::vector<std::string> closed;
  auto add = [&](const std::string& src, const std::string& name) {
    return cap.add(src, [&closed, name] { closed.push_back(name); });
  };
  auto rank = add("127.0.0.1", "rank");
  add("127.0.0.9", "a1");
  add("127.0.0.9", "a2");
  add("127.0.0.9", "a3");
  add("127.0.0.3", "other");  // over the total: 127.0.0.9 holds most
  CHECK(closed == std::vector<std::string>{"a1"});
  cap.remove(rank);  // authenticated: no longer pending, never evicted
  CHECK(cap.size() == 3);
  for (int i = 0; i < 10; ++i) add("127.0.0.9", "b");
  CHECK(cap.size() == 4);
  CHECK(std::count(closed.begin(), closed.end(), "rank") == 0);
  // A lone newcomer is never the one closed, even when every source holds one.
  PendingCap one({/*total=*/2, /*per_source=*/1});
  std::vector<int> gone;
  one.add("a", [&] { gone.push_back(1); });
  one.add("b", [&] { gone.push_back(2); });
  one.add("c", [&] { gone.push_back(3); });
  CHECK(gone == std::vector<int>{1});
}
