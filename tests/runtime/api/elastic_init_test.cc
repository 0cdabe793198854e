// init() under a control channel (runtime/api/api.cc, place()): a rank whose generation the
// agent ended joins the placement the agent sent at its next init(), says it left, keeps
// that placement across later plain re-inits, and fails with a clear error when the agent
// is gone. A standalone rank (size 1) stands in for a job: the placement moves its
// generation; the rendezvous is its own.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>

#include "common/control_protocol.h"
#include "common/fd.h"
#include "hvdrun/hvdrun.h"
#include "runtime/core/generation_end.h"

using hvdrun::UniqueFd;
using hvdrun::runtime::generation_end;
using namespace hvdrun::control;
using namespace std::chrono_literals;

namespace {

// Reads one message the rank sent, waiting at most 10 s.
std::optional<Message> next_message(int fd, Decoder& d) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto m = d.next()) return m;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) != 1) continue;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return std::nullopt;
    d.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("init() joins the generation its agent placed it in", "[runtime][control]") {
  generation_end().rearm();
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  UniqueFd agent(sv[0]);
  REQUIRE(::setenv("HVDRUN_CONTROL_FD", std::to_string(sv[1]).c_str(), 1) == 0);

  hvdrun::init();
  CHECK(hvdrun::generation() == 0);

  // The agent ends generation 0 and places the rank in generation 1.
  Placement p;
  p.generation = 1;
  p.failure = true;
  p.hosts_removed = true;
  const std::string frames =
      encode(EndGeneration{0, "generation 0 ended: host node2 was lost"}) + encode(p);
  REQUIRE(::send(agent.get(), frames.data(), frames.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(frames.size()));
  pollfd ended{generation_end().fd(), POLLIN, 0};
  REQUIRE(::poll(&ended, 1, 10000) == 1);
  hvdrun::shutdown();
  hvdrun::init();
  CHECK(hvdrun::generation() == 1);
  CHECK_FALSE(generation_end().ended());  // the new generation starts unended
  Decoder d;
  CHECK(next_message(agent.get(), d) == std::optional<Message>(Left{0}));
  float x = 2.0F;
  hvdrun::allreduce(&x, &x, 1, hvdrun::DataType::kFloat32, hvdrun::ReduceOp::kSum);
  CHECK(x == 2.0F);
  hvdrun::shutdown();

  // A plain re-init (a collective failed on every rank) stays where the agent put it.
  hvdrun::init();
  CHECK(hvdrun::generation() == 1);
  hvdrun::shutdown();

  // The agent is gone: the generation ends and init() says so at once.
  agent.reset();
  REQUIRE(::poll(&ended, 1, 10000) == 1);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(hvdrun::init(), Catch::Contains("agent"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  ::unsetenv("HVDRUN_CONTROL_FD");
}
