// LogLimiter: one line per cause per interval, and the next line carries the count.
#include "common/log_limiter.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>

using hvdrun::LogLimiter;
using namespace std::chrono_literals;

TEST_CASE("log limiter: one line per cause per interval, then the count held back",
          "[common][security]") {
  LogLimiter log(10s);
  const auto t0 = LogLimiter::Clock::now();
  std::uint64_t held = 99;
  REQUIRE(log.admit("wrong secret", held, t0));
  CHECK(held == 0);
  int written = 0;
  for (int i = 1; i <= 1000; ++i) written += log.admit("wrong secret", held, t0 + i * 5ms) ? 1 : 0;
  CHECK(written == 0);
  // Another cause has its own line.
  CHECK(log.admit("accept: Too many open files", held, t0 + 1s));
  CHECK(held == 0);
  // After the interval: one line, counting the 1,000 held back.
  REQUIRE(log.admit("wrong secret", held, t0 + 10s));
  CHECK(held == 1000);
  CHECK_FALSE(log.admit("wrong secret", held, t0 + 11s));
  CHECK(log.total() == 1004);
}

TEST_CASE("log limiter: endless distinct causes share one line", "[common][security]") {
  LogLimiter log(10s);
  const auto t0 = LogLimiter::Clock::now();
  std::uint64_t held = 0;
  int written = 0;
  for (int i = 0; i < 10000; ++i)
    written += log.admit("cause " + std::to_string(i), held, t0) ? 1 : 0;
  CHECK(written == 65);  // 64 told apart, then all others as one
}
