// The rules for paths another local user might also write (common/safe_path.h), on real
// directories: every component checked, links followed only when trusted, what is made
// private, and each refusal naming the component and the reason. Cases that need a file
// of another user make it with chown, as root (CI runs as root); elsewhere they skip.
#include "common/safe_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "tests/skip.h"
#include "tests/support/processes.h"

using hvdrun::open_private_dir;
using hvdrun::open_private_file;
using hvdrun::open_trusted_dir;
using hvdrun::UniqueFd;
using hvdrun::UnsafePath;
using hvdrun::testing::read_file;
using hvdrun::testing::TempDir;
using hvdrun::testing::write_text;

namespace {

constexpr uid_t kNobody = 65534;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The UnsafePath `f` throws, as "'path' why"; FAILs when it throws none.
template <typename F>
std::string refusal(F f) {
  try {
    f();
  } catch (const UnsafePath& e) {
    return e.what();
  }
  FAIL("no refusal");
  return {};
}

}  // namespace

TEST_CASE("safe paths: missing directories are made 0700, only when asked") {
  TempDir tmp("safe");
  const std::string deep = tmp.path() + "/a/b/c";
  CHECK_THAT(refusal([&] { open_trusted_dir(deep, false); }),
             Catch::Contains("'" + tmp.path() + "/a' cannot be examined (No such file"));
  const mode_t old = ::umask(0);  // even with no umask: nothing for anyone else
  CHECK(open_trusted_dir(deep, true));
  ::umask(old);
  for (const std::string& p : {tmp.path() + "/a", tmp.path() + "/a/b", deep})
    CHECK(mode_of(p) == 0700);
  // ".", ".." and repeated slashes walk as the kernel would.
  CHECK(open_trusted_dir(tmp.path() + "//a/./b/../b/c/", false));
}

TEST_CASE("safe paths: a directory others may write is refused unless sticky") {
  TempDir tmp("safe");
  const std::string dir = tmp.path() + "/shared";
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  CHECK_THAT(refusal([&] { open_trusted_dir(dir + "/out", true); }),
             Catch::Contains("'" + dir + "' is writable by every user and has no sticky bit"));
  REQUIRE(::chmod(dir.c_str(), 0770) == 0);
  CHECK_THAT(refusal([&] { open_trusted_dir(dir, false); }),
             Catch::Contains("is writable by its group and has no sticky bit"));
  REQUIRE(::chmod(dir.c_str(), 01777) == 0);  // like /tmp
  CHECK(open_trusted_dir(dir + "/out", true));
  // What hvdrun keeps for itself must be writable by nobody else, sticky or not.
  UniqueFd top = open_trusted_dir(dir, false);
  REQUIRE(::mkdir((dir + "/mine").c_str(), 0700) == 0);
  REQUIRE(::chmod((dir + "/mine").c_str(), 01777) == 0);
  CHECK_THAT(refusal([&] { open_private_dir(top.get(), dir + "/mine", "mine"); }),
             Catch::Contains("is writable by other users"));
}

TEST_CASE("safe paths: links of this user are followed, every directory on the way checked") {
  TempDir tmp("safe");
  const std::string real = tmp.path() + "/real";
  REQUIRE(::mkdir(real.c_str(), 0700) == 0);
  REQUIRE(::symlink("real", (tmp.path() + "/rel").c_str()) == 0);
  REQUIRE(::symlink(real.c_str(), (tmp.path() + "/abs").c_str()) == 0);
  CHECK(open_trusted_dir(tmp.path() + "/rel", false));
  CHECK(open_trusted_dir(tmp.path() + "/abs/../real", false));
  // A link to a place others may write: the place itself is checked, not just the link.
  const std::string open_dir = tmp.path() + "/open";
  REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0777) == 0);
  REQUIRE(::symlink(open_dir.c_str(), (tmp.path() + "/to-open").c_str()) == 0);
  CHECK_THAT(refusal([&] { open_trusted_dir(tmp.path() + "/to-open", false); }),
             Catch::Contains("'" + open_dir + "' is writable by every user"));
  REQUIRE(::symlink("loop", (tmp.path() + "/loop").c_str()) == 0);
  CHECK_THAT(refusal([&] { open_trusted_dir(tmp.path() + "/loop", false); }),
             Catch::Contains("too many levels of symbolic links"));
}

TEST_CASE("safe paths: another user's link, directory or file is refused by name") {
  if (::geteuid() != 0) HVDRUN_SKIP("needs root to give files to another user");
  TempDir tmp("safe");
  REQUIRE(::chmod(tmp.path().c_str(), 01777) == 0);
  const std::string theirs = tmp.path() + "/theirs";
  REQUIRE(::mkdir(theirs.c_str(), 0755) == 0);
  REQUIRE(::chown(theirs.c_str(), kNobody, kNobody) == 0);
  CHECK_THAT(refusal([&] { open_trusted_dir(theirs + "/below", true); }),
             Catch::Contains("'" + theirs + "' belongs to another user, nobody (uid 65534)"));
  REQUIRE(::symlink(tmp.path().c_str(), (tmp.path() + "/link").c_str()) == 0);
  REQUIRE(::lchown((tmp.path() + "/link").c_str(), kNobody, kNobody) == 0);
  CHECK_THAT(refusal([&] { open_trusted_dir(tmp.path() + "/link", false); }),
             Catch::Contains("is a symbolic link that belongs to another user, nobody"));
  UniqueFd top = open_trusted_dir(tmp.path(), false);
  CHECK_THAT(refusal([&] { open_private_dir(top.get(), theirs, "theirs"); }),
             Catch::Contains("belongs to another user, nobody"));
  const std::string file = tmp.path() + "/file";
  write_text(file, "theirs\n");
  REQUIRE(::chown(file.c_str(), kNobody, kNobody) == 0);
  REQUIRE(::chmod(file.c_str(), 0666) == 0);
  CHECK_THAT(refusal([&] { open_private_file(top.get(), file, "file", true); }),
             Catch::Contains("'" + file + "' belongs to another user, nobody"));
  CHECK(read_file(file) == "theirs\n");  // not truncated
}

TEST_CASE("safe paths: a file is never opened through a link, never waited on as a FIFO") {
  TempDir tmp("safe");
  UniqueFd top = open_trusted_dir(tmp.path(), false);
  const std::string precious = tmp.path() + "/precious";
  write_text(precious, "keep\n");
  REQUIRE(::symlink(precious.c_str(), (tmp.path() + "/link").c_str()) == 0);
  CHECK_THAT(
      refusal([&] { open_private_file(top.get(), tmp.path() + "/link", "link", true); }),
      Catch::Contains("is a symbolic link (owned by") && Catch::Contains("and is not followed"));
  CHECK(read_file(precious) == "keep\n");
  REQUIRE(::mkfifo((tmp.path() + "/fifo").c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(refusal([&] { open_private_file(top.get(), tmp.path() + "/fifo", "fifo", true); }),
             Catch::Contains("is not a regular file (a FIFO or socket)"));
  // With a reader at the other end the open succeeds, and fstat refuses it.
  UniqueFd reader(::open((tmp.path() + "/fifo").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  REQUIRE(reader);
  CHECK_THAT(refusal([&] { open_private_file(top.get(), tmp.path() + "/fifo", "fifo", true); }),
             Catch::Contains("is not a regular file; remove it"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  REQUIRE(::mkdir((tmp.path() + "/dir").c_str(), 0700) == 0);
  CHECK_THAT(refusal([&] { open_private_file(top.get(), tmp.path() + "/dir", "dir", true); }),
             Catch::Contains("is a directory, not a file"));
  // A file of this user is emptied only when asked, and a new one is 0600.
  const mode_t old = ::umask(0);
  UniqueFd made = open_private_file(top.get(), tmp.path() + "/new", "new", true);
  ::umask(old);
  CHECK(mode_of(tmp.path() + "/new") == 0600);
  UniqueFd kept = open_private_file(top.get(), precious, "precious", false);
  CHECK(read_file(precious) == "keep\n");
  UniqueFd emptied = open_private_file(top.get(), precious, "precious", true);
  CHECK(read_file(precious).empty());
}
