// Issue #14 and its third round: what another local user (`nobody`, through runuser) can
// plant where a job writes files of its own — --output-filename's directory and files, the
// timeline — and what the job does about it: refuse by name what it must not follow,
// truncate or write into, and leave the planted target untouched. Every case runs the real
// hvdrun; the attacker's steps are real commands run as nobody (docs/security.md).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/processes.h"

using namespace hvdrun::testing;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

}  // namespace

TEST_CASE("output files: what another user planted in DIR is refused and nothing is overwritten") {
  TempDir tmp("sec");
  // A shared scratch directory like /tmp: everyone may create entries, sticky.
  const std::string shared = tmp.path() + "/shared";
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);
  REQUIRE(::chmod(tmp.path().c_str(), 0755) == 0);
  // The victim: root's file and directory that nobody can read or write.
  const std::string victim = tmp.path() + "/victim";
  REQUIRE(::mkdir(victim.c_str(), 0700) == 0);
  const std::string secret = victim + "/precious";
  write_text(secret, "root's data\n");
  const std::string out = shared + "/out";
  std::string bad;    // the path the message must name
  std::string where;  // what the message must say is wrong with it

  SECTION("DIR is a directory nobody made, holding a link to root's file") {
    REQUIRE(as_nobody("mkdir -p '" + out + "/rank.0' && ln -s '" + secret + "' '" + out +
                      "/rank.0/stdout'") == 0);
    bad = out;
    where = "belongs to another user, nobody";
  }
  SECTION("DIR is a symbolic link nobody planted to root's directory") {
    REQUIRE(as_nobody("ln -s '" + victim + "' '" + out + "'") == 0);
    bad = out;
    where = "is a symbolic link that belongs to another user, nobody";
  }
  SECTION("DIR is root's but writable by everyone, and nobody planted rank.0 as a link") {
    REQUIRE(::mkdir(out.c_str(), 0777) == 0);
    REQUIRE(::chmod(out.c_str(), 0777) == 0);
    REQUIRE(as_nobody("ln -s '" + victim + "' '" + out + "/rank.0'") == 0);
    bad = out;
    where = "is writable by every user and has no sticky bit";
  }
  SECTION("DIR is root's and sticky, and nobody planted rank.0 as a link") {
    REQUIRE(::mkdir(out.c_str(), 0777) == 0);
    REQUIRE(::chmod(out.c_str(), 01777) == 0);
    REQUIRE(as_nobody("ln -s '" + victim + "' '" + out + "/rank.0'") == 0);
    bad = out + "/rank.0";
    where = "is a symbolic link (owned by nobody";
  }
  SECTION("DIR is root's and sticky, and rank.0 is a directory of nobody's") {
    REQUIRE(::mkdir(out.c_str(), 0777) == 0);
    REQUIRE(::chmod(out.c_str(), 01777) == 0);
    REQUIRE(as_nobody("mkdir '" + out + "/rank.0'") == 0);
    bad = out + "/rank.0";
    where = "belongs to another user, nobody";
  }
  auto t0 = Clock::now();
  Hvdrun h({"-np", "1", "--output-filename", out, "sh", "-c", "echo overwritten"});
  CHECK(h.wait() == 2);
  const double ms = ms_since(t0);
  INFO(h.err);
  CHECK(h.err.find("--output-filename: '" + bad + "' " + where) != std::string::npos);
  CHECK(h.err.find("give --output-filename a directory of your own") != std::string::npos);
  CHECK(h.out.empty());  // refused before any rank started
  CHECK(read_file(secret) == "root's data\n");
  struct stat st {};
  CHECK(::stat((victim + "/rank.0").c_str(), &st) != 0);
  CHECK(::stat((victim + "/stdout").c_str(), &st) != 0);
  report_fault({"--output-filename into a place another user controls (" + where + ")",
                "exit 2 before any rank starts, naming the path", ms, 0, "nothing overwritten"});
}

TEST_CASE("output files: what --output-filename creates is private") {
  TempDir tmp("sec");
  const std::string out = tmp.path() + "/new/logs";
  const mode_t old = ::umask(0);  // even with no umask: nothing readable by others
  Hvdrun h({"-np", "2", "--output-filename", out, "sh", "-c", "echo hi"});
  ::umask(old);
  REQUIRE(h.wait() == 0);
  for (const std::string& p : {tmp.path() + "/new", out, out + "/rank.1"}) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0700);
  }
  struct stat st {};
  REQUIRE(::stat((out + "/rank.1/stdout").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(read_file(out + "/rank.1/stdout") == "hi\n");
}

TEST_CASE("timeline: what another user planted at its path costs the job its timeline only") {
  TempDir tmp("sec");
  REQUIRE(::chmod(tmp.path().c_str(), 0755) == 0);
  // A shared scratch directory like /tmp: everyone may create entries, sticky.
  const std::string shared = tmp.path() + "/shared";
  REQUIRE(::mkdir(shared.c_str(), 0777) == 0);
  REQUIRE(::chmod(shared.c_str(), 01777) == 0);
  // The victim: root's file that nobody can read or write.
  const std::string victim = tmp.path() + "/victim";
  REQUIRE(::mkdir(victim.c_str(), 0700) == 0);
  const std::string secret = victim + "/precious";
  write_text(secret, "root's data\n");
  const std::string path = shared + "/timeline.json";
  std::string where;  // what the warning must say is wrong with the path
  SECTION("a symbolic link nobody planted to the user's 0600 file") {
    REQUIRE(as_nobody("ln -s '" + secret + "' '" + path + "'") == 0);
    where = "is a symbolic link (owned by nobody";
  }
  SECTION("a FIFO nobody made (opening it would hang rank 0)") {
    REQUIRE(as_nobody("mkfifo -m 666 '" + path + "'") == 0);
    where = "is not a regular file";
  }
  SECTION("a directory nobody made") {
    REQUIRE(as_nobody("mkdir '" + path + "'") == 0);
    where = "is a directory, not a file";
  }
  SECTION("a file nobody made writable by everyone, to read and alter the timeline") {
    REQUIRE(as_nobody("touch '" + path + "' && chmod 666 '" + path + "'") == 0);
    where = "belongs to another user, nobody";
  }
  const auto t0 = Clock::now();
  Hvdrun h({"-np", "2", "--timeline-filename", path, kWorker, "collectives"});
  CHECK(h.wait(std::chrono::seconds(60)) == 0);  // the job runs, without its timeline
  const double ms = ms_since(t0);
  INFO(h.err);
  CHECK(count(h.err, "no timeline is written (HOROVOD_TIMELINE): '" + path + "' " + where) == 1);
  CHECK(read_file(secret) == "root's data\n");
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  if (S_ISREG(st.st_mode)) {
    CHECK(st.st_size == 0);  // nobody's file received nothing
  }
  report_fault({"timeline path prepared by another user (" + where + ")",
                "job runs without its timeline, one warning naming the path", ms, 0,
                "nothing followed, truncated or written"});
}
