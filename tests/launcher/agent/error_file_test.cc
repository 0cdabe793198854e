// The ranks' error files (launcher/agent/error_file.h): what the agent takes from
// torchelastic's JSON, what it refuses, and its private directory.
#include "launcher/agent/error_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>

#include "tests/support/processes.h"

using hvdrun::launcher::error_file_traceback;
using hvdrun::launcher::ErrorDir;
using hvdrun::launcher::read_error_file;

TEST_CASE("error file: torchelastic's py_callstack is the traceback, its escapes decoded") {
  const std::string json =
      R"({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": )"
      R"("Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: bad\n", )"
      R"("timestamp": "1795963160"}}, "version": [1, 2.5, true, null]})";
  CHECK(error_file_traceback(json) ==
        "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: bad\n");
}

TEST_CASE("error file: the message when there is no callstack, and the older plain-string form") {
  CHECK(error_file_traceback(R"({"message": {"message": "RuntimeError: x", "extraInfo": {}}})") ==
        "RuntimeError: x");
  CHECK(error_file_traceback(R"({"message": "SignalException: got SIGTERM"})") ==
        "SignalException: got SIGTERM");
  // \u escapes, a surrogate pair among them, become UTF-8.
  CHECK(error_file_traceback(R"({"message": "caf\u00e9 \ud83d\ude00 \u4e2d"})") ==
        "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad");
}

TEST_CASE("error file: anything that is not torchelastic's JSON yields no traceback") {
  for (const char* bad :
       {"", "not json", R"({"message": {"message": "x")", R"({"message": 3})", R"(["message"])",
        R"({"other": "x"})", R"({"message": "x"} trailing)", R"({"message": "bad \q escape"})",
        R"({"message": "\u12"})", R"({"message": {"extraInfo": {"py_callstack": 7}}})"}) {
    INFO(bad);
    CHECK_FALSE(error_file_traceback(bad).has_value());
  }
  // Nesting deeper than the reader follows is refused, not a stack overflow.
  const std::string deep =
      R"({"message": )" + std::string(100000, '[') + "1" + std::string(100000, ']') + "}";
  CHECK_FALSE(error_file_traceback(deep).has_value());
}

TEST_CASE("error file: a long traceback keeps its end, and a missing file is no traceback") {
  hvdrun::testing::TempDir dir("errfile");
  const std::string path = dir.path() + "/rank-0.json";
  CHECK(read_error_file(path).empty());
  std::string lines;
  for (int i = 0; i < 1000; ++i) lines += "line " + std::to_string(i) + "\\n";
  hvdrun::testing::write_text(path, R"({"message": ")" + lines + R"("})");
  const std::string tb = read_error_file(path, 100);
  CHECK(tb.rfind("...\n", 0) == 0);
  CHECK(tb.size() == 104);
  CHECK(tb.substr(tb.size() - 8) == "line 999");  // the trailing newline dropped
}

TEST_CASE("error file: the agent's directory is private and fresh paths drop a former file") {
  std::string where;
  {
    ErrorDir errors("job1");
    const std::string p = errors.path(3);
    where = p.substr(0, p.rfind('/'));
    struct stat st {};
    REQUIRE(::stat(where.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    hvdrun::testing::write_text(p, R"({"message": "old"})");
    CHECK(errors.fresh_path(3) == p);
    CHECK(read_error_file(p).empty());  // the former rank's file is gone
    hvdrun::testing::write_text(p, R"({"message": "new"})");
  }
  struct stat st {};
  CHECK(::stat(where.c_str(), &st) != 0);  // removed with its files
}

TEST_CASE("error file: the directory goes to $XDG_RUNTIME_DIR, then /dev/shm, then $TMPDIR") {
  // Restores a variable the test changes, whatever it held.
  struct Saved {
    const char* name;
    std::optional<std::string> value;
    explicit Saved(const char* n) : name(n) {
      if (const char* v = std::getenv(n)) value = v;
    }
    ~Saved() {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  } runtime("XDG_RUNTIME_DIR"), tmpdir("TMPDIR");
  const auto parent_of = [](const ErrorDir& d) {
    const std::string p = d.path(0);
    const std::string dir = p.substr(0, p.rfind('/'));
    return dir.substr(0, dir.rfind('/'));
  };
  hvdrun::testing::TempDir mine("xdg");
  ::setenv("XDG_RUNTIME_DIR", mine.path().c_str(), 1);
  CHECK(parent_of(ErrorDir("job2")) == mine.path());
  // One that is not there (an inherited value, under Slurm say) is passed over.
  ::setenv("XDG_RUNTIME_DIR", (mine.path() + "/gone").c_str(), 1);
  struct stat st {};
  const bool shm =
      ::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && ::access("/dev/shm", W_OK | X_OK) == 0;
  ::setenv("TMPDIR", mine.path().c_str(), 1);
  CHECK(parent_of(ErrorDir("job3")) == (shm ? "/dev/shm" : mine.path()));
}
