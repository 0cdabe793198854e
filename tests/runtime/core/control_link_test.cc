// The rank's end of the agent's control channel (runtime/core/control_link.h) over a real
// socketpair, the test playing the agent: an end-generation sets the process's end mark,
// a placement is handed to whoever waits for it, the rank's declarations reach the agent,
// and the channel's end (the agent gone) ends the generation. Waits are on the end mark's
// eventfd and the link's own wait, each with a deadline.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "common/control_protocol.h"
#include "common/fd.h"
#include "runtime/core/control_link.h"
#include "runtime/core/generation_end.h"

using hvdrun::UniqueFd;
using hvdrun::runtime::ControlLink;
using hvdrun::runtime::generation_end;
using namespace hvdrun::control;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::pair<UniqueFd, UniqueFd> socket_pair() {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  return {UniqueFd(sv[0]), UniqueFd(sv[1])};
}

void write_all(int fd, const std::string& bytes) {
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

// Waits until the end mark is set (its eventfd readable), at most `limit`.
bool ended_within(std::chrono::milliseconds limit) {
  pollfd p{generation_end().fd(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(limit.count())) == 1 && generation_end().ended();
}

// Reads one message the rank sent, waiting at most 10 s.
Message read_message(int fd) {
  Decoder d;
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    if (auto m = d.next()) return *m;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) != 1) continue;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    REQUIRE(n > 0);
    d.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  }
  FAIL("the rank sent nothing within 10 s");
  return Elastic{};
}

}  // namespace

TEST_CASE("control link: end of generation, placement, declarations", "[runtime][control]") {
  generation_end().rearm();
  auto [agent, rank] = socket_pair();
  ControlLink link(std::move(rank));

  link.declare_elastic(0);
  CHECK(read_message(agent.get()) == Message{Elastic{0}});

  CHECK_FALSE(link.placement_pending(0));
  CHECK_FALSE(link.wait_placement(0, Clock::now() + 50ms).has_value());  // none yet

  Placement p;
  p.generation = 1;
  p.rank = 1;
  p.size = 2;
  p.local_size = 1;
  p.cross_rank = 1;
  p.cross_size = 2;
  p.rendezvous_addr = "127.0.0.1";
  p.rendezvous_port = 40123;
  p.secret = std::string(64, 'f');
  p.hosts_removed = true;
  p.failure = true;
  write_all(agent.get(),
            encode(EndGeneration{0, "generation 0 ended: host node2 was lost"}) + encode(p));
  REQUIRE(ended_within(10s));
  CHECK(generation_end().reason() == "generation 0 ended: host node2 was lost");
  const auto got = link.wait_placement(0, Clock::now() + 10s);
  REQUIRE(got.has_value());
  CHECK(*got == p);
  CHECK(link.placement_pending(0));
  CHECK_FALSE(link.placement_pending(1));  // nothing beyond generation 1 yet

  link.left(0);
  CHECK(read_message(agent.get()) == Message{Left{0}});
  CHECK_FALSE(link.closed());
  generation_end().rearm();
}

TEST_CASE("control link: the agent's end or a garbled frame ends the generation",
          "[runtime][control]") {
  generation_end().rearm();
  {
    auto [agent, rank] = socket_pair();
    ControlLink link(std::move(rank));
    agent.reset();  // the agent is gone
    REQUIRE(ended_within(10s));
    CHECK_THAT(generation_end().reason(),
               Catch::Contains("control channel") && Catch::Contains("end of file"));
    const auto t0 = Clock::now();
    CHECK_FALSE(link.wait_placement(0, Clock::now() + 30s).has_value());
    CHECK(Clock::now() - t0 < 5s);  // closed: no wait for the deadline
    CHECK(link.closed());
    CHECK_THROWS_WITH(link.declare_elastic(0),
                      Catch::Contains("the agent or the launcher is gone"));
  }
  generation_end().rearm();
  {
    auto [agent, rank] = socket_pair();
    ControlLink link(std::move(rank));
    write_all(agent.get(), std::string("\x00\x00\x00\x01\x2a", 5));
    REQUIRE(ended_within(10s));
    CHECK_THAT(generation_end().reason(),
               Catch::Contains("malformed frame") && Catch::Contains("unknown frame type 42"));
  }
  generation_end().rearm();
  {
    // A link stopped by its owner leaves the generation alone.
    auto [agent, rank] = socket_pair();
    { ControlLink link(std::move(rank)); }
    CHECK_FALSE(generation_end().ended());
  }
}
