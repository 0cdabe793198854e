// The rank group guard as its agent dies: it kills the process groups it watches, but never
// one it was told to forget, which stands for a reaped rank's group id that the kernel has
// since given to an unrelated group (issue #27, finding 6).
#include "launcher/process/group_guard.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "common/fd.h"
#include "tests/support/processes.h"

using hvdrun::UniqueFd;
using hvdrun::launcher::GroupGuard;
using namespace hvdrun::testing;
using namespace std::chrono_literals;

namespace {

// A child of this process that leads a process group of its own and waits to be killed.
pid_t group_leader() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::pause();
    ::_exit(0);
  }
  // Set from both sides, so that the group exists before anyone is told of it.
  ::setpgid(pid, pid);
  return pid;
}

// Reaps `pid` and says whether SIGKILL ended it (with the watched group, by the guard).
bool killed(pid_t pid) {
  int status = 0;
  return ::waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

}  // namespace

TEST_CASE("group guard: an agent's death kills the groups it watches, never one forgotten") {
  const pid_t rank_group = group_leader();
  const pid_t reused_id = group_leader();
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  UniqueFd from_agent(p[0]);
  UniqueFd to_test(p[1]);
  // A stand-in agent (forked, so single-threaded, as the guard needs): it starts the guard,
  // watches two groups, forgets one (it reaped that rank), and dies without release().
  const pid_t agent = ::fork();
  if (agent == 0) {
    try {
      GroupGuard guard;
      guard.watch(rank_group);
      guard.watch(reused_id);
      guard.forget(reused_id);
      const pid_t guard_pid = guard.pid();
      (void)!::write(to_test.get(), &guard_pid, sizeof guard_pid);
      ::_exit(0);  // in the guard's scope: its destructor never runs, no "done" is sent
    } catch (...) {
      ::_exit(1);
    }
  }
  to_test.reset();
  pid_t guard = -1;
  REQUIRE(::read(from_agent.get(), &guard, sizeof guard) == sizeof guard);
  int status = 0;
  REQUIRE(::waitpid(agent, &status, 0) == agent);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  // The guard kills what it kills and exits at once: once it is gone, it is done.
  const bool guard_done = wait_none_alive({guard}, 10s * kSlowdown);
  const bool forgotten_alive = alive(reused_id);
  const bool watched_gone = wait_none_alive({rank_group}, 10s * kSlowdown);
  for (pid_t pid : {rank_group, reused_id}) ::kill(pid, SIGKILL);
  CHECK(guard_done);
  CHECK(watched_gone);
  CHECK(killed(rank_group));
  CHECK(forgotten_alive);
  ::waitpid(reused_id, nullptr, 0);
}
