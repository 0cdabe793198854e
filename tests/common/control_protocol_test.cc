// The agent-rank control channel's codec (common/control_protocol.h): every message
// round-trips, frames split anywhere decode the same, and malformed frames are errors.
#include "common/control_protocol.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

using namespace hvdrun::control;

namespace {

std::vector<Message> samples() {
  Placement p;
  p.generation = 3;
  p.rank = 2;
  p.size = 4;
  p.local_rank = 0;
  p.local_size = 2;
  p.cross_rank = 1;
  p.cross_size = 2;
  p.rendezvous_addr = "127.0.0.1";
  p.rendezvous_port = 65535;
  p.secret = std::string(64, 'a');
  p.hosts_removed = true;
  p.failure = true;
  return {Elastic{0}, Left{2}, EndGeneration{2, "rank 5 on host node3 exited with code 1"}, p,
          EndGeneration{-1, ""}};
}

}  // namespace

TEST_CASE("control channel: every message round-trips, whole or a byte at a time",
          "[common][control]") {
  std::string wire;
  for (const auto& m : samples()) wire += encode(m);
  Decoder whole;
  whole.feed(wire);
  std::vector<Message> got;
  while (auto m = whole.next()) got.push_back(*m);
  CHECK(got == samples());
  CHECK(whole.buffered() == 0);

  Decoder bytewise;
  std::vector<Message> got2;
  for (char c : wire) {
    bytewise.feed(std::string(1, c));
    while (auto m = bytewise.next()) got2.push_back(*m);
  }
  CHECK(got2 == samples());
}

TEST_CASE("control channel: malformed frames are errors naming what is wrong",
          "[common][control]") {
  const auto error_of = [](const std::string& bytes) -> std::string {
    Decoder d;
    d.feed(bytes);
    try {
      while (d.next()) {
      }
    } catch (const ProtocolError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(error_of(std::string("\x00\x00\x00\x01\x09", 5)),
             Catch::Contains("unknown frame type 9"));
  CHECK_THAT(error_of(std::string("\x00\x00\x00\x00", 4)), Catch::Contains("at least 1"));
  CHECK_THAT(error_of(std::string("\x7f\x00\x00\x00", 4)), Catch::Contains("at most"));
  // An Elastic frame with a field too short, and one with a byte too many.
  CHECK_THAT(error_of(std::string("\x00\x00\x00\x03\x01\x00\x00", 7)),
             Catch::Contains("truncated"));
  CHECK_THAT(error_of(std::string("\x00\x00\x00\x06\x01\x00\x00\x00\x00\x07", 10)),
             Catch::Contains("1 bytes left over"));
  // A placement whose boolean is 2.
  std::string p = encode(Placement{});
  p.back() = 2;
  CHECK_THAT(error_of(p), Catch::Contains("boolean field holds 2"));
  // A reason too long for a frame is refused when encoding.
  CHECK_THROWS_AS(encode(EndGeneration{0, std::string(kMaxFrameBytes, 'x')}), ProtocolError);
  // A partial frame is not an error until the stream ends: it waits for more.
  Decoder partial;
  partial.feed(encode(Left{1}).substr(0, 6));
  CHECK_FALSE(partial.next().has_value());
  CHECK(partial.buffered() == 6);
}
