// Issue #27, finding 6: the process group id of a rank that exited long before the teardown
// is a number the kernel may have handed to an unrelated process since. The cases make that
// happen for real (root may set /proc/sys/kernel/ns_last_pid, the pid handed out last) and
// check that neither the agent's teardown nor its guard, when the agent is killed, touches
// the unrelated group.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "tests/skip.h"
#include "tests/support/processes.h"

using hvdrun::UniqueFd;
using namespace hvdrun::testing;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Polls `pred` every 10 ms until it holds (true) or `within` passes (false).
template <typename Pred>
bool wait_until(Pred pred, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// A child of this process with pid `pid` (free by now) that leads a session and process
// group of its own, as an unrelated daemon would; -1 with `why` where that cannot be made.
// The next pid the kernel hands out follows ns_last_pid, which root may write; another
// process forking in between takes it, so this tries a few times.
pid_t unrelated_group_with_id(pid_t pid, std::string& why) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    UniqueFd last(::open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC));
    const std::string text = std::to_string(pid - 1);
    if (!last || ::write(last.get(), text.data(), text.size()) < 0) {
      why = std::string("cannot set /proc/sys/kernel/ns_last_pid: ") + std::strerror(errno);
      return -1;
    }
    last.reset();
    const pid_t child = ::fork();
    if (child == 0) {
      ::setsid();
      ::pause();
      ::_exit(0);
    }
    if (child == pid) {
      // The id is the group's only once setsid() has run in the child.
      if (wait_until([&] { return ::getpgid(pid) == pid; }, 5s)) return pid;
      why = "the process with pid " + std::to_string(pid) + " did not lead a group in time";
    }
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
    }
    if (child == pid) return -1;
  }
  why = "other processes kept taking pid " + std::to_string(pid);
  return -1;
}

// True once no process, not even a zombie, has `pid`: its parent reaped it.
bool reaped(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// The pids of `parent`'s children (from its main thread's children list).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  const std::string text = read_file("/proc/" + std::to_string(parent) + "/task/" +
                                     std::to_string(parent) + "/children");
  const char* p = text.c_str();
  char* end = nullptr;
  for (long v = std::strtol(p, &end, 10); end != p; v = std::strtol(p, &end, 10)) {
    out.push_back(static_cast<pid_t>(v));
    p = end;
  }
  return out;
}

}  // namespace

TEST_CASE("teardown never kills the process group id of a rank reaped long before") {
  // The job ends normally (the agent's own teardown), or its agent is SIGKILLed (the group
  // guard's).
  const bool agent_killed = GENERATE(false, true);
  TempDir tmp("stale");
  const std::string& d = tmp.path();
  REQUIRE(::mkfifo((d + "/go").c_str(), 0600) == 0);
  // Rank 0 exits at once; rank 1 names itself and its agent, then waits on the FIFO.
  const std::string script = "if [ $HVDRUN_RANK = 0 ]; then echo $$ > " + d +
                             "/r0; exit 0; fi; echo $PPID > " + d + "/agent; echo $$ > " + d +
                             "/r1; read line < " + d + "/go; exit 0";
  Hvdrun h({"-np", "2", "sh", "-c", script});
  const pid_t rank0 = read_pid_file(d + "/r0", 15s * kSlowdown);
  const pid_t rank1 = read_pid_file(d + "/r1", 15s * kSlowdown);
  const pid_t agent = read_pid_file(d + "/agent");
  // The agent reaps rank 0: its pid, its group's id, is free from then on.
  REQUIRE(wait_until([&] { return reaped(rank0); }, 10s * kSlowdown));
  std::string why;
  const pid_t unrelated = unrelated_group_with_id(rank0, why);
  if (unrelated < 0) HVDRUN_SKIP("cannot give an unrelated group pid " << rank0 << ": " << why);
  INFO("rank 0 was pid " << rank0 << "; an unrelated session and group now has that id");
  if (agent_killed) {
    std::vector<pid_t> guard = children_of(agent);
    guard.erase(std::remove(guard.begin(), guard.end(), rank1), guard.end());
    REQUIRE(guard.size() == 1);
    REQUIRE(::kill(agent, SIGKILL) == 0);
    // The guard kills the groups it was left and exits: once it is gone, it is done.
    CHECK(wait_none_alive(guard, 10s * kSlowdown));
    CHECK(h.wait() == 255);
  } else {
    {
      UniqueFd go(::open((d + "/go").c_str(), O_WRONLY | O_CLOEXEC));
      REQUIRE(go);
      REQUIRE(::write(go.get(), "go\n", 3) == 3);
    }
    CHECK(h.wait() == 0);
    // The agent's teardown is over once it has exited.
    CHECK(wait_none_alive({agent}, 10s * kSlowdown));
  }
  INFO("hvdrun's stderr: " << h.err);
  const bool survived = alive(unrelated);
  ::kill(unrelated, SIGKILL);
  ::waitpid(unrelated, nullptr, 0);
  CHECK(survived);
  report_fault({std::string("a rank's pid, its group id, reused by an unrelated group before ") +
                    (agent_killed ? "the agent is SIGKILLed" : "the job ends"),
                "the unrelated group is left alone: only unreaped ranks' groups are killed", 0, 0,
                "nothing"});
}
