// children_of_self and kill_adopted: the children of every thread, zombies left out of the
// live list, adopted processes killed.
#include "launcher/reaper.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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
