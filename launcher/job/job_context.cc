// SystemJobClock and the process's job context.
#include "launcher/job/job_context.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "common/env_names.h"
#include "common/error.h"

extern char** environ;

namespace hvdrun::launcher {
namespace {

using std::chrono::milliseconds;

const char* process_getenv(const char* name) { return std::getenv(name); }

milliseconds env_duration(const char* (*getenv)(const char*), const char* name,
                          milliseconds fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end || d < 0) {
    throw UsageError(std::string(name) + "='" + v + "' is not a number of seconds; expected e.g. " +
                     name + "=30");
  }
  return milliseconds(static_cast<long>(d * 1000));
}

}  // namespace

SystemJobClock::SystemJobClock()
    : signals_({SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGUSR1, SIGUSR2, SIGQUIT}) {}

JobClock::Clock::time_point SystemJobClock::now() { return Clock::now(); }

int SystemJobClock::wait(std::vector<pollfd>& fds, Clock::time_point until) {
  auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now());
  if (left.count() < 0) left = {};
  timespec ts{static_cast<time_t>(left.count() / 1000000000),
              static_cast<long>(left.count() % 1000000000)};
  int rc = ::ppoll(fds.data(), fds.size(), &ts, signals_.wait_mask());
  if (rc < 0 && errno != EINTR) throw_errno("launcher main loop", "ppoll");
  return std::max(rc, 0);
}

int SystemJobClock::take_interrupt() {
  int first = 0;
  bool last_seen = false;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (signals_.take(sig) == 0) continue;
    if (first == 0) first = sig;
    last_seen = last_seen || SignalMask::last() == sig;
  }
  // The latest interrupt, even when a SIGTSTP came after it.
  return last_seen ? SignalMask::last() : first;
}

bool SystemJobClock::take_suspend() { return signals_.take(SIGTSTP) > 0; }

std::vector<int> SystemJobClock::take_forwarded() {
  std::vector<int> out;
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (signals_.take(sig) > 0) out.push_back(sig);
  }
  return out;
}

bool SystemJobClock::take_stacks_request() { return signals_.take(SIGQUIT) > 0; }

void SystemJobClock::stop_self() { ::kill(::getpid(), SIGSTOP); }

JobContext process_context(const char* (*getenv)(const char*)) {
  if (!getenv) getenv = process_getenv;
  JobContext ctx;
  ctx.environment = environ;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) throw_errno("finding the working directory", "getcwd");
  ctx.cwd = cwd;
  ctx.kill_grace = env_duration(getenv, env_names::kKillGrace, milliseconds(3000));
  ctx.heartbeat_timeout = env_duration(getenv, env_names::kHeartbeatTimeout, milliseconds(30000));
  ctx.heartbeat_interval =
      std::max(milliseconds(10), std::min(milliseconds(1000), ctx.heartbeat_timeout / 4));
  if (ctx.heartbeat_timeout.count() == 0) ctx.heartbeat_interval = milliseconds(1000);
  return ctx;
}

}  // namespace hvdrun::launcher
