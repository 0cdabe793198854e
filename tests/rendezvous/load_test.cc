// The rendezvous load generator (bench/rendezvous_load.cc) at a size the normal suite can
// afford: its simulated ranks must pass the real server's authentication and the
// check-in and barrier must complete, and with one leader per host the server must see
// one connection per host (the generator's figure is the server process's own count).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "tests/support/processes.h"

using hvdrun::testing::CapturedProcess;
using namespace std::chrono_literals;

namespace {

const std::string kLoad = HVDRUN_BINARY_DIR "/tests/rendezvous/hvdrun_rendezvous_load";

// The number after "name=" in the generator's one-line report.
long long field(const std::string& out, const std::string& name) {
  const auto at = out.find(" " + name + "=");
  if (at == std::string::npos) return -1;
  return std::stoll(out.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("rendezvous load: simulated ranks check in and pass a barrier", "[rendezvous][load]") {
  CapturedProcess per_rank({kLoad, "512"});
  REQUIRE(per_rank.wait(60s) == 0);
  INFO(per_rank.out << per_rank.err);
  CHECK(field(per_rank.out, "server_connections") == 512);
  CHECK(field(per_rank.out, "requests") == 512 * 5 + 2);  // + the last rank's two sets
  CHECK(field(per_rank.out, "evicted") == 0);

  CapturedProcess batched({kLoad, "512", "--per-host", "16"});
  REQUIRE(batched.wait(60s) == 0);
  INFO(batched.out << batched.err);
  CHECK(field(batched.out, "server_connections") == 32);
  CHECK(field(batched.out, "requests") == 32 * 5 + 2);
}

TEST_CASE("rendezvous load: bad arguments are refused with exit 2", "[rendezvous][load]") {
  CapturedProcess p({kLoad, "100", "--per-host", "16"});
  CHECK(p.wait(10s) == 2);
  CHECK_THAT(p.err, Catch::Contains("multiple of --per-host"));
}
