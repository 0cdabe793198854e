// The output relay: whole tagged lines whatever the chunking, no interleaving between
// ranks, partial last lines, long lines streamed, per-rank files byte-exact.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "common/fd.h"
#include "launcher/output/output_relay.h"

using namespace hvdrun;
using namespace hvdrun::launcher;
using proto::Stream;

namespace {

// An in-memory file standing in for hvdrun's stdout or stderr.
struct MemFile {
  UniqueFd fd{::memfd_create("relay", MFD_CLOEXEC)};
  std::string contents() const {
    std::string s;
    off_t size = ::lseek(fd.get(), 0, SEEK_END);
    s.resize(static_cast<std::size_t>(size));
    REQUIRE(::pread(fd.get(), s.data(), s.size(), 0) == size);
    return s;
  }
};

struct Fixture {
  MemFile out, err;
  RelayOptions options(std::size_t long_line = 1u << 20) {
    RelayOptions o;
    o.stdout_fd = out.fd.get();
    o.stderr_fd = err.fd.get();
    o.long_line_bytes = long_line;
    return o;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("lines split across chunks come out whole and tagged") {
  Fixture fx;
  OutputRelay relay(fx.options(), 2);
  relay.add(0, Stream::out, "ab");
  relay.add(0, Stream::out, "c\nde");
  relay.add(0, Stream::out, "f\ng\nh");
  relay.add(1, Stream::err, "oops\n");
  relay.end_rank(0);
  relay.drain();
  CHECK(fx.out.contents() == "[0]<stdout>:abc\n[0]<stdout>:def\n[0]<stdout>:g\n[0]<stdout>:h\n");
  CHECK(fx.err.contents() == "[1]<stderr>:oops\n");
}

TEST_CASE("one rank's partial line is never mixed with another rank's line") {
  Fixture fx;
  OutputRelay relay(fx.options(), 3);
  relay.add(0, Stream::out, "hel");
  relay.add(1, Stream::out, "world\nsec");
  relay.add(0, Stream::out, "lo\n");
  relay.add(2, Stream::out, "x\n");
  relay.add(1, Stream::out, "ond\n");
  relay.drain();
  CHECK(fx.out.contents() ==
        "[1]<stdout>:world\n[0]<stdout>:hello\n[2]<stdout>:x\n[1]<stdout>:second\n");
}

TEST_CASE("an unterminated last line is flushed with a newline when the rank ends") {
  Fixture fx;
  OutputRelay relay(fx.options(), 1);
  relay.add(0, Stream::out, "done");
  relay.add(0, Stream::err, "warn");
  relay.drain();
  CHECK(fx.out.contents().empty());
  relay.end_rank(0);
  relay.drain();
  CHECK(fx.out.contents() == "[0]<stdout>:done\n");
  CHECK(fx.err.contents() == "[0]<stderr>:warn\n");
}

TEST_CASE("a line longer than the limit is streamed whole while others wait behind it") {
  Fixture fx;
  OutputRelay relay(fx.options(/*long_line=*/16), 2);
  std::string long_line(100, 'L');
  relay.add(0, Stream::out, long_line.substr(0, 30));
  relay.add(1, Stream::out, "short\nmore");  // must not land inside rank 0's line
  relay.add(0, Stream::out, long_line.substr(30, 50));
  relay.add(1, Stream::out, "\n");
  relay.add(0, Stream::out, long_line.substr(80) + "\nnext\n");
  relay.end_rank(0);
  relay.end_rank(1);
  relay.drain();
  CHECK(fx.out.contents() == "[0]<stdout>:" + long_line +
                                 "\n[1]<stdout>:short\n[1]<stdout>:more\n" + "[0]<stdout>:next\n");
}

TEST_CASE("a rank that ends while another's long line is open still gets its output out") {
  Fixture fx;
  OutputRelay relay(fx.options(/*long_line=*/8), 2);
  relay.add(0, Stream::out, std::string(20, 'a'));  // streaming, no newline yet
  relay.add(1, Stream::out, "tail-without-newline");
  relay.end_rank(1);
  relay.add(0, Stream::out, "b\n");
  relay.end_rank(0);
  relay.drain();
  CHECK(fx.out.contents() ==
        "[0]<stdout>:" + std::string(20, 'a') + "b\n[1]<stdout>:tail-without-newline\n");
}

TEST_CASE("timestamps prefix every line like horovodrun's") {
  Fixture fx;
  RelayOptions o = fx.options();
  o.timestamp = true;
  OutputRelay relay(o, 1);
  relay.add(0, Stream::out, "a\nb\n");
  relay.drain();
  std::regex line(R"(([A-Z][a-z]{2} [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \d{4})\[0\]<stdout>:[ab]\n)");
  std::string s = fx.out.contents();
  auto begin = std::sregex_iterator(s.begin(), s.end(), line);
  CHECK(std::distance(begin, std::sregex_iterator()) == 2);
}

TEST_CASE("per-rank files hold the raw bytes in rank directories padded like horovodrun's") {
  CHECK(OutputRelay::rank_dir_name(0, 1) == "rank.0");
  CHECK(OutputRelay::rank_dir_name(9, 10) == "rank.9");
  CHECK(OutputRelay::rank_dir_name(7, 12) == "rank.07");
  CHECK(OutputRelay::rank_dir_name(10, 11) == "rank.10");
  CHECK(OutputRelay::rank_dir_name(5, 101) == "rank.005");

  char tmpl[] = "/tmp/hvdrun-relay-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string dir = std::string(tmpl) + "/nested/out";
  {
    Fixture fx;
    RelayOptions o = fx.options();
    o.output_dir = dir;
    OutputRelay relay(o, 1);
    relay.add(0, Stream::out, "no newline at the end");
    relay.add(0, Stream::err, "e1\ne2");
    relay.end_rank(0);
    relay.drain();
  }
  CHECK(read_file(dir + "/rank.0/stdout") == "no newline at the end");
  CHECK(read_file(dir + "/rank.0/stderr") == "e1\ne2");
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  CHECK(!ec);
}

TEST_CASE("ranks added to a running relay get tags, tails and files named as the job began") {
  char tmpl[] = "/tmp/hvdrun-relay-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  const std::string dir = std::string(tmpl) + "/out";
  Fixture fx;
  {
    RelayOptions o = fx.options();
    o.output_dir = dir;
    OutputRelay relay(o, 9);
    relay.add(8, Stream::out, "eight ");
    relay.add(9, Stream::out, "not yet a rank\n");  // dropped: beyond the size
    CHECK(relay.add_ranks(3).empty());
    relay.add(8, Stream::out, "old\n");
    relay.add(11, Stream::out, "eleven\n");
    relay.add(10, Stream::err, "ten\n");
    CHECK(relay.stderr_tail(10) == std::vector<std::string>{"ten"});
    relay.drain();
  }
  CHECK(fx.out.contents() == "[8]<stdout>:eight old\n[11]<stdout>:eleven\n");
  CHECK(fx.err.contents() == "[10]<stderr>:ten\n");
  // Rank directories keep the width of the job's first size (9: one digit).
  CHECK(read_file(dir + "/rank.8/stdout") == "eight old\n");
  CHECK(read_file(dir + "/rank.11/stdout") == "eleven\n");
  CHECK(read_file(dir + "/rank.10/stderr") == "ten\n");
  CHECK(!std::filesystem::exists(dir + "/rank.09"));

  // A directory that cannot take the new ranks' files: said, and their output still relayed.
  {
    Fixture fx2;
    RelayOptions o = fx2.options();
    o.output_dir = std::string(tmpl) + "/out2";
    OutputRelay relay(o, 1);
    std::filesystem::create_symlink("/tmp", o.output_dir + "/rank.1");
    const std::string error = relay.add_ranks(1);
    CHECK(error.find("rank.1") != std::string::npos);
    relay.add(1, Stream::out, "still relayed\n");
    relay.drain();
    CHECK(fx2.out.contents() == "[1]<stdout>:still relayed\n");
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  CHECK(!ec);
}

TEST_CASE("the relay keeps the last stderr lines of each rank") {
  Fixture fx;
  RelayOptions o = fx.options();
  o.tail_lines = 2;
  OutputRelay relay(o, 2);
  relay.add(1, Stream::err, "one\ntwo\nthr");
  relay.add(1, Stream::err, "ee\nfour");
  relay.add(1, Stream::out, "not stderr\n");
  CHECK(relay.stderr_tail(1) == std::vector<std::string>{"three", "four"});
  CHECK(relay.stderr_tail(0).empty());
}

TEST_CASE("big chunks of many lines are tagged exactly") {
  Fixture fx;
  OutputRelay relay(fx.options(), 1);
  std::string input, expected;
  for (int i = 0; i < 50000; ++i) {
    std::string l =
        "line " + std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'x') + "\n";
    input += l;
    expected += "[0]<stdout>:" + l;
  }
  for (std::size_t i = 0; i < input.size(); i += 65521)
    relay.add(0, Stream::out, std::string_view(input).substr(i, 65521));
  relay.drain();
  CHECK(fx.out.contents() == expected);
}
