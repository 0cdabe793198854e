// The agent frame codec: round trips, arbitrary chunking, and rejection of every kind of
// malformed input with a clear message.
#include <catch2/catch.hpp>

#include <signal.h>

#include <string>

#include "launcher/agent/agent_protocol.h"

using namespace hvdrun::launcher;
namespace proto = hvdrun::launcher::proto;

namespace {

std::string encoded(const proto::Message& m) {
  ByteQueue q;
  proto::encode(m, q);
  return std::string(q.view());
}

std::vector<proto::Message> decode_all(const std::string& bytes, std::size_t chunk) {
  proto::Decoder d;
  std::vector<proto::Message> out;
  for (std::size_t i = 0; i < bytes.size(); i += chunk) {
    d.feed(std::string_view(bytes).substr(i, chunk));
    while (auto m = d.next()) {
      // Output views die with the next call: keep a copy for comparison.
      if (auto* o = std::get_if<proto::Output>(&*m)) {
        static std::vector<std::string> keep;
        keep.emplace_back(o->data);
        o->data = keep.back();
      }
      out.push_back(*m);
    }
  }
  return out;
}

std::string frame(std::uint8_t type, const std::string& payload) {
  std::string s;
  std::uint32_t len = static_cast<std::uint32_t>(payload.size() + 1);
  s.push_back(static_cast<char>(len >> 24));
  s.push_back(static_cast<char>(len >> 16));
  s.push_back(static_cast<char>(len >> 8));
  s.push_back(static_cast<char>(len));
  s.push_back(static_cast<char>(type));
  return s + payload;
}

std::string decode_error(const std::string& bytes) {
  proto::Decoder d;
  d.feed(bytes);
  try {
    while (d.next()) {
    }
  } catch (const proto::ProtocolError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every message survives a round trip whatever the chunking") {
  proto::Spawn spawn;
  spawn.rank = 7;
  spawn.argv = {"python", "train.py", "--lr", "0.1", ""};
  spawn.cwd = "/home/user/dir with spaces";
  spawn.host_env = {"HOME", "LC_*"};
  spawn.env = {"A=1", "B=two words", "C=line\nbreak", "HVDRUN_SECRET=abc"};
  spawn.env_defaults = {"LANG=C.UTF-8", "OMP_NUM_THREADS=1"};
  spawn.stderr_tail_lines = 5;
  proto::RankExited exited{3,
                           true,
                           9,
                           {"Traceback", "ValueError: x"},
                           "Traceback (most recent call last):\n  ...\nValueError: x\n"};
  proto::Regenerate regenerate;
  regenerate.generation = 3;
  regenerate.reason = "rank 5 on host node3 exited with code 1";
  regenerate.failure = true;
  regenerate.hosts_removed = true;
  regenerate.size = 4;
  regenerate.rendezvous_addr = "10.0.0.1";
  regenerate.rendezvous_port = 41000;
  regenerate.secret = std::string(64, 'e');
  regenerate.ranks = {{0, 0, 0, 2, 0, 2}, {1, 1, 1, 2, 0, 2}};
  proto::Hello hello;
  hello.launcher_addr = "10.0.0.1";
  hello.job_id = "4711";
  hello.network_interface = "ib0";
  hello.want_topology = true;
  std::vector<proto::Message> msgs = {
      hello,
      proto::AgentHello{proto::kVersion,
                        1234,
                        "node1",
                        29500,
                        "eth1",
                        {"10.0.0.2", "fe80::1"},
                        "host node1\nallowed 0-1\n"},
      spawn,
      proto::RankStarted{7, 4321},
      proto::Output{7, proto::Stream::err, std::string_view("some\nbytes\0here", 15)},
      exited,
      proto::Kill{250},
      proto::Heartbeat{},
      proto::Fatal{2, "cannot start rank 2"},
      proto::Suspend{},
      proto::Resume{},
      proto::RankStopped{4, 19},
      proto::RankStopped{4, 0},
      proto::RankElastic{4, 2},
      regenerate,
      proto::Regenerate{},
      proto::RankLeft{4, 2},
      proto::Signal{SIGUSR1},
      proto::JobEnd{3, "rank 2 failed\n", true},
      proto::StacksRequest{7, 3000},
      proto::Stacks{7,
                    {{0, proto::StackStatus::whole, "File \"a.py\", line 3\nhvdrun-stacks-end\n"},
                     {1, proto::StackStatus::no_handler, ""}}},
      proto::Stacks{}};
  std::string all;
  for (const auto& m : msgs) all += encoded(m);
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{7}, all.size()}) {
    auto got = decode_all(all, chunk);
    REQUIRE(got.size() == msgs.size());
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      CHECK(got[i].index() == msgs[i].index());
      CHECK(got[i] == msgs[i]);
    }
  }
}

TEST_CASE("an output header written in place decodes like an encoded output frame") {
  std::string data = "hello\nworld";
  std::string bytes(proto::kOutputHeaderBytes, '\0');
  proto::write_output_header(bytes.data(), 5, proto::Stream::out,
                             static_cast<std::uint32_t>(data.size()));
  bytes += data;
  CHECK(encoded(proto::Output{5, proto::Stream::out, data}) == bytes);
}

TEST_CASE("oversized frame lengths are rejected before anything is allocated") {
  std::string hello = encoded(proto::Hello{});
  std::string big = "\xff\xff\xff\xf0";
  CHECK_THAT(decode_error(hello + big + "x"), Catch::Contains("exceeds the limit"));
  CHECK_THAT(decode_error(hello + std::string("\0\0\0\0", 4)), Catch::Contains("empty"));
}

TEST_CASE("a stream that does not start with a hello names what it saw") {
  std::string err = decode_error("Welcome to Ubuntu 22.04 LTS\n");
  CHECK_THAT(err, Catch::Contains("Welcome to"));
  CHECK_THAT(err, Catch::Contains("login script"));
  CHECK_THAT(decode_error(encoded(proto::Heartbeat{})), Catch::Contains("instead of a hello"));
}

TEST_CASE("malformed payloads are protocol errors") {
  std::string hello = encoded(proto::Hello{});
  SECTION("unknown type") {
    CHECK_THAT(decode_error(hello + frame(77, "")), Catch::Contains("unknown frame type 77"));
  }
  SECTION("truncated field") {
    CHECK_THAT(decode_error(hello + frame(7, std::string(2, '\0'))), Catch::Contains("truncated"));
  }
  SECTION("trailing bytes") {
    CHECK_THAT(decode_error(hello + frame(8, "x")), Catch::Contains("trailing"));
  }
  SECTION("list count beyond the frame") {
    std::string p = std::string("\0\0\0\1", 4) + "\x7f\xff\xff\xff";
    CHECK_THAT(decode_error(hello + frame(3, p)), Catch::Contains("overruns the frame"));
  }
  SECTION("string length beyond the frame") {
    std::string p = std::string("\0\0\0\1", 4) + std::string("\0\0\0\1", 4) + "\x7f\xff\xff\xff";
    CHECK_THAT(decode_error(hello + frame(3, p)), Catch::Contains("overruns the frame"));
  }
  SECTION("bad stream") {
    std::string p = std::string("\0\0\0\1", 4) + "\x03" + std::string("\0\0\0\0", 4);
    CHECK_THAT(decode_error(hello + frame(5, p)), Catch::Contains("neither 1 nor 2"));
  }
  SECTION("wrong magic") {
    CHECK_THAT(decode_error(frame(1, std::string("ABCD\0\0\0\1", 8))), Catch::Contains("magic"));
  }
}

TEST_CASE("a hello with another version decodes far enough to report the mismatch") {
  std::string p = std::string("HVDA") + std::string("\0\0\0\x0c", 4) + "future fields";
  proto::Decoder d;
  d.feed(frame(1, p));
  auto m = d.next();
  REQUIRE(m);
  CHECK(std::get<proto::Hello>(*m).version == 12);
}

TEST_CASE("a version 1 agent hello (no interface field) is read as a version mismatch") {
  // Version 1 ended the agent hello after the free port.
  std::string p = std::string("HVDA") + std::string("\0\0\0\x01", 4) +
                  std::string("\0\0\x04\xd2", 4) + std::string("\0\0\0\x05", 4) + "node1" +
                  std::string("\x73\x3c", 2);
  proto::Decoder d;
  d.feed(frame(2, p));
  auto m = d.next();
  REQUIRE(m);
  CHECK(std::get<proto::AgentHello>(*m).version == 1);
  CHECK(proto::kVersion == 11);
}

TEST_CASE("a message larger than the frame limit cannot be encoded") {
  proto::Spawn s;
  s.argv = {"x"};
  s.env.assign(20, std::string(1u << 20, 'v'));
  ByteQueue q;
  CHECK_THROWS_AS(proto::encode(s, q), proto::ProtocolError);
}

TEST_CASE("a regenerate frame whose placement count overruns the frame is refused") {
  proto::Regenerate m;
  m.ranks = {{1, 0, 0, 1, 0, 1}};
  std::string bytes = encoded(m);
  // The count sits just before the one placement's 24 bytes: claim 1000 placements.
  const std::size_t count_at = bytes.size() - 24 - 4;
  bytes[count_at + 2] = '\x03';
  bytes[count_at + 3] = '\xe8';
  bytes = encoded(proto::Hello{}) + bytes;  // a stream starts with a hello
  CHECK_THROWS_WITH(decode_all(bytes, bytes.size()),
                    Catch::Contains("bad regenerate frame") &&
                        Catch::Contains("list of 1000 placements overruns the frame"));
}
