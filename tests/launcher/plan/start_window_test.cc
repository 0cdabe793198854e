// StartWindow: the bounded host starter's bookkeeping, driven by a simulated launch whose
// hosts finish in a shuffled order; and the HVDRUN_LAUNCH_CONCURRENCY parser.
#include "launcher/plan/start_window.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "common/error.h"

using hvdrun::launcher::launch_concurrency;
using hvdrun::launcher::StartWindow;

namespace {

// Runs a launch of `total` hosts through a window of `limit`, finishing a random host in
// flight each step; `fail_at` (when < total) is a host that fails. Returns the order in
// which hosts were started and the most that were ever in flight.
struct Simulated {
  std::vector<std::size_t> started;
  std::size_t most = 0;
  std::size_t skipped = 0;
  std::size_t started_at_failure = 0;  // hosts handed out when the failing one finished
};

Simulated simulate(std::size_t total, std::size_t limit, std::size_t fail_at, unsigned seed) {
  std::mt19937 rng(seed);
  StartWindow w(total, limit);
  Simulated out;
  std::vector<std::size_t> flying;
  while (!w.done()) {
    while (auto i = w.next()) {
      out.started.push_back(*i);
      flying.push_back(*i);
    }
    out.most = std::max(out.most, w.in_flight());
    REQUIRE(w.in_flight() == flying.size());
    REQUIRE(!flying.empty());
    std::uniform_int_distribution<std::size_t> pick(0, flying.size() - 1);
    const std::size_t k = pick(rng);
    const std::size_t host = flying[k];
    flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(k));
    w.finished();
    if (host == fail_at) {
      w.stop();
      out.started_at_failure = out.started.size();
    }
  }
  out.skipped = w.skipped();
  return out;
}

}  // namespace

TEST_CASE("StartWindow: never more than the limit in flight, every host started once, in order") {
  for (std::size_t limit : {1u, 3u, 64u, 128u, 5000u}) {
    for (unsigned seed = 1; seed <= 3; ++seed) {
      const Simulated s = simulate(1000, limit, 1000, seed);
      INFO("limit " << limit << " seed " << seed);
      CHECK(s.most == std::min<std::size_t>(limit, 1000));
      REQUIRE(s.started.size() == 1000);
      for (std::size_t i = 0; i < s.started.size(); ++i) CHECK(s.started[i] == i);
      CHECK(s.skipped == 0);
    }
  }
}

TEST_CASE("StartWindow: after a failure no further host starts and those in flight finish") {
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const Simulated s = simulate(1000, 16, 40, seed);
    INFO("seed " << seed);
    CHECK(s.started_at_failure > 40);
    CHECK(s.started.size() == s.started_at_failure);  // nothing after the failure
    CHECK(s.started.size() < 1000);
    CHECK(s.skipped == 1000 - s.started.size());
  }

  StartWindow w(5, 2);
  CHECK(w.next() == 0u);
  CHECK(w.next() == 1u);
  CHECK_FALSE(w.next().has_value());  // the window is full
  w.finished();
  w.stop();
  CHECK_FALSE(w.next().has_value());  // stopped: even with a free slot
  CHECK_FALSE(w.done());              // host 0 or 1 is still in flight
  w.finished();
  CHECK(w.done());
  CHECK(w.skipped() == 3);
}

TEST_CASE("StartWindow: an empty launch is done at once and a limit of 0 counts as 1") {
  StartWindow empty(0, 8);
  CHECK(empty.done());
  CHECK_FALSE(empty.next().has_value());
  StartWindow one(3, 0);
  CHECK(one.next() == 0u);
  CHECK_FALSE(one.next().has_value());
}

TEST_CASE("HVDRUN_LAUNCH_CONCURRENCY: default 128, whole numbers 1..65536, else a usage error") {
  CHECK(launch_concurrency(nullptr) == 128);
  CHECK(launch_concurrency("") == 128);
  CHECK(launch_concurrency("1") == 1);
  CHECK(launch_concurrency("65536") == 65536);
  for (const char* bad : {"0", "65537", "-1", "12x", " 4", "many"}) {
    INFO(bad);
    CHECK_THROWS_AS(launch_concurrency(bad), hvdrun::UsageError);
  }
  CHECK_THROWS_WITH(launch_concurrency("0"),
                    Catch::Contains("HVDRUN_LAUNCH_CONCURRENCY='0' is not a whole number"));
}
