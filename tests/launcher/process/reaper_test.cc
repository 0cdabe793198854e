// children_of_self and kill_adopted: the children of every thread, zombies left out of the
// live list, adopted processes killed.
#include "launcher/process/reaper.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using hvdrun::launcher::children_of_self;
using hvdrun::launcher::kill_adopted;

namespace {

pid_t sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::pause();
    ::_exit(0);
  }
  return pid;
}

bool has(const std::vector<pid_t>& v, pid_t pid) {
  return std::find(v.begin(), v.end(), pid) != v.end();
}

// read() calls this process has made so far (syscr of /proc/self/io).
long read_calls() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long value = 0;
  while (io >> key >> value) {
    if (key == "syscr:") return value;
  }
  return -1;
}

}  // namespace

TEST_CASE("children_of_self: children of this thread and of another thread, no zombie") {
  const pid_t mine = sleeper();
  pid_t theirs = -1;
  std::thread([&] { theirs = sleeper(); }).join();
  const pid_t zombie = ::fork();
  if (zombie == 0) ::_exit(0);
  // The zombie: exited but not reaped (waitid with WNOWAIT waits for the exit only).
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(zombie), &info, WEXITED | WNOWAIT) == 0);

  const auto kids = children_of_self();
  CHECK(has(kids, mine));
  CHECK(has(kids, theirs));
  CHECK_FALSE(has(kids, zombie));

  // kill_adopted ends all but those kept, and reaps the zombie on the way.
  const int killed =
      kill_adopted({mine}, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  CHECK(killed >= 1);
  CHECK(has(children_of_self(), mine));
  CHECK_FALSE(has(children_of_self(), theirs));
  ::kill(mine, SIGKILL);
  ::waitpid(mine, nullptr, 0);
  CHECK_FALSE(has(children_of_self(), mine));
}

TEST_CASE("children_of_self: costs reads per own child, not per process of the machine") {
  // 60 processes that are not this one's children (a child's children), so that the
  // machine has at least that many; a scan of /proc would read each one's stat.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  const pid_t helper = ::fork();
  if (helper == 0) {
    ::close(go[1]);  // the write end stays with the test alone: closing it releases them
    for (int i = 0; i < 60; ++i) {
      if (::fork() == 0) {
        char c;
        (void)!::read(go[0], &c, 1);  // until the pipe closes
        ::_exit(0);
      }
    }
    char c;
    (void)!::read(go[0], &c, 1);
    while (::wait(nullptr) > 0) {  // its children, before it leaves them orphans
    }
    ::_exit(0);
  }
  ::close(go[0]);
  const pid_t child = sleeper();
  if (read_calls() < 0) {
    WARN("no /proc/self/io here: not measured");
  } else {
    const long before = read_calls();
    const auto kids = children_of_self();
    const long reads = read_calls() - before - 1;  // the second read_calls()'s own read
    CHECK(has(kids, child));
    CHECK(has(kids, helper));
    // A thread's children file (and its EOF), and one stat per child to leave out zombies.
    CHECK(reads <= 12);
  }
  ::close(go[1]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::waitpid(helper, nullptr, 0);
}
