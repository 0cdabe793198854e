// The process layer: spawn with exec and without, exec failures reported through the
// status pipe, exit descriptions, the wait with a deadline, and SignalMask's counts.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/fd.h"
#include "launcher/process/subprocess.h"

using namespace hvdrun;
using namespace hvdrun::launcher;
using namespace std::chrono_literals;

namespace {

std::chrono::steady_clock::time_point in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

}  // namespace

TEST_CASE("spawn: an exec'd child in its own group, with its environment and stdout") {
  auto [r, w] = make_pipe();
  // The child's own PATH finds sh; GREETING exists only in its environment.
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "GREETING=hello"};
  ChildSpec spec;
  spec.argv = {"sh", "-c", "echo \"$GREETING\"; exit 3"};
  spec.env = &env;
  spec.stdout_fd = w.get();
  Child child = spawn(spec);
  w.reset();
  CHECK_FALSE(read_exec_failure(child.exec_status.get()).has_value());
  CHECK(::getpgid(child.pid) == child.pid);
  char buf[16] = {};
  CHECK(::read(r.get(), buf, sizeof buf) == 6);
  CHECK(std::string(buf) == "hello\n");
  CHECK(wait_or_kill(child.pid, in(10s)) == "exited with code 3");
}

TEST_CASE("spawn: a program that cannot be executed or bound comes back as an ExecFailure") {
  ChildSpec spec;
  spec.argv = {"/nonexistent/program"};
  Child child = spawn(spec);
  auto failure = read_exec_failure(child.exec_status.get());
  REQUIRE(failure.has_value());
  CHECK_FALSE(failure->chdir);
  CHECK(failure->error == ENOENT);
  CHECK(wait_or_kill(child.pid, in(10s)) == "exited with code 127");

  // A CPU set the kernel refuses (a CPU this machine does not have) fails before exec.
  spec.cpus = {CPU_SETSIZE - 1};
  child = spawn(spec);
  failure = read_exec_failure(child.exec_status.get());
  REQUIRE(failure.has_value());
  CHECK(failure->bind);
  CHECK_FALSE(failure->chdir);
  CHECK(failure->error == EINVAL);
  CHECK(wait_or_kill(child.pid, in(10s)) == "exited with code 127");
  spec.cpus.clear();

  spec.argv = {"true"};
  spec.cwd = "/nonexistent/dir";
  child = spawn(spec);
  failure = read_exec_failure(child.exec_status.get());
  REQUIRE(failure.has_value());
  CHECK(failure->chdir);
  wait_or_kill(child.pid, in(10s));
}

TEST_CASE("spawn: a function child without exec, and a child killed at the deadline") {
  ChildSpec spec;
  spec.main = [] { return 5; };
  spec.own_group = false;
  Child child = spawn(spec);
  CHECK_FALSE(child.exec_status);
  CHECK(wait_or_kill(child.pid, in(10s)) == "exited with code 5");

  ChildSpec sleeper;
  sleeper.argv = {"sleep", "30"};
  child = spawn(sleeper);
  CHECK(wait_or_kill(child.pid, in(50ms)) == "did not exit in time and was killed");
}

TEST_CASE("describe_exit and signal_text name the signal") {
  CHECK(signal_text(SIGTERM) == "signal 15 (SIGTERM)");
  ChildSpec spec;
  spec.main = [] {
    ::raise(SIGKILL);
    return 0;
  };
  Child child = spawn(spec);
  CHECK_THAT(wait_or_kill(child.pid, in(10s)), Catch::StartsWith("was killed by signal 9 ("));
}

TEST_CASE("SignalMask counts each arrival once and restores the mask") {
  sigset_t before;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &before);
  {
    SignalMask mask({SIGHUP});
    sigset_t during;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &during);
    CHECK(sigismember(&during, SIGHUP) == 1);
    CHECK(sigismember(mask.wait_mask(), SIGHUP) == 0);
    ::kill(::getpid(), SIGHUP);
    ::kill(::getpid(), SIGHUP);  // blocked: pending, delivered once in the wait below
    timespec zero{0, 0};
    ::ppoll(nullptr, 0, &zero, mask.wait_mask());
    CHECK(mask.take(SIGHUP) == 1);
    CHECK(mask.take(SIGHUP) == 0);
    CHECK(SignalMask::last() == SIGHUP);
  }
  sigset_t after;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &after);
  CHECK(sigismember(&after, SIGHUP) == sigismember(&before, SIGHUP));
}
