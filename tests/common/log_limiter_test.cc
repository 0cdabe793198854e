// LogLimiter: one line per cause per interval, and the next line carries the count.
#include "common/log_limiter.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/preauth_gate.h"
#include "tests/support/captured_log.h"

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

TEST_CASE("log limiter: a port's warnings go to hvdrun's log, never a program's own logger",
          "[common][security]") {
  // Inside a training program the default logger is the program's (spdlog's writes to its
  // stdout): a port's gate there (the frame port, a rank's own rendezvous) must leave it
  // alone and write to stderr.
  hvdrun::testing::CapturedLog program("program");
  hvdrun::testing::CapturedStderr err;
  hvdrun::PreauthGate gate("test port", "that have not authenticated", hvdrun::PreauthPolicy{});
  gate.refuse("bad hello",
              "test port: a connection from uid 65534 on this host did not prove "
              "the job secret");
  CHECK(program.text().empty());
  CHECK_THAT(err.text(), Catch::Contains("a connection from uid 65534 on this host did not prove"));
}

TEST_CASE("log limiter: in the launcher its warnings go to the launcher's logger",
          "[common][security]") {
  hvdrun::testing::CapturedLog launcher;  // named "hvdrun", as the launcher's is
  LogLimiter log(10s);
  log.warn("cause", "a line for the launcher's log");
  CHECK(launcher.lines_with("a line for the launcher's log") == 1);
}
