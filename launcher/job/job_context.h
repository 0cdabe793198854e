// What the job loop reaches outside itself, behind seams that tests replace: the clock
// and its waits (and the signals that interrupt them), the environment, where output goes,
// the teardown and heartbeat settings; and the failures the job sees.
#pragma once

#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/subprocess.h"

namespace hvdrun::launcher {

/// The job loop's time: now(), the wait for its descriptors, and the interrupting signals
/// that end a wait early.
class JobClock {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~JobClock() = default;
  /// The current time.
  virtual Clock::time_point now() = 0;
  /// Waits until a descriptor of `fds` is ready or `until` passes. Returns the number of
  /// ready descriptors (0 when the time passed or a signal arrived). Throws SystemError.
  virtual int wait(std::vector<pollfd>& fds, Clock::time_point until) = 0;
  /// The latest interrupting signal (SIGINT, SIGTERM, SIGHUP) that arrived since the last
  /// call, or 0.
  virtual int take_interrupt() = 0;
  /// True when a suspend request (SIGTSTP: Ctrl-Z) arrived since the last call.
  virtual bool take_suspend() { return false; }
  /// The signals for the ranks (SIGUSR1, SIGUSR2) that arrived since the last call, each
  /// once however often it came.
  virtual std::vector<int> take_forwarded() { return {}; }
  /// True when SIGQUIT (Ctrl-\ on a terminal) asked for a stack report since the last call.
  virtual bool take_stacks_request() { return false; }
  /// Stops this process as a shell job stops (SIGSTOP); returns once it is continued.
  virtual void stop_self() {}
};

/// The real clock: steady_clock and ppoll, with SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGUSR1,
/// SIGUSR2 and SIGQUIT blocked except inside the wait. Construct it before any thread starts, so
/// that every thread inherits the block and only the loop sees those signals.
class SystemJobClock : public JobClock {
 public:
  SystemJobClock();
  Clock::time_point now() override;
  int wait(std::vector<pollfd>& fds, Clock::time_point until) override;
  int take_interrupt() override;
  bool take_suspend() override;
  std::vector<int> take_forwarded() override;
  bool take_stacks_request() override;
  void stop_self() override;

 private:
  SignalMask signals_;
};

/// A failure the job saw: a rank that failed, an agent lost, the start deadline passed,
/// an interrupt, a server that stopped.
struct Failure {
  /// hvdrun's exit code if this failure decides it.
  int exit_code = 0;
  /// What to print (names the rank or host, and the cause), newline-terminated.
  std::string message;
  /// The hosts to blame: the failed rank's, the lost agent's, those that did not start.
  std::vector<std::string> hosts;
  /// A rank exited non-zero or was killed (its host is in `hosts`); false when the host
  /// itself failed.
  bool rank_failed = false;
  /// An interrupt (SIGINT, SIGTERM, SIGHUP) to hvdrun, not a fault of the job.
  bool interrupted = false;
  /// A stop asked for from outside the job (JobHooks::should_stop), not a fault.
  bool requested = false;
  /// Ends an elastic job for good: no restart, no re-formation (discovery has not listed
  /// enough slots for --min-np within --elastic-timeout).
  bool final = false;
  /// The job ran past --timeout (exit_status::kTimedOut); also final.
  bool timed_out = false;
};

/// Everything the job loop takes from its surroundings.
struct JobContext {
  /// Time and waiting (required).
  JobClock* clock = nullptr;
  /// The launcher's environment (environ-style, null-terminated): the base of every rank's
  /// environment on this machine, and the source of the variables forwarded to others.
  char* const* environment = nullptr;
  /// The ranks' working directory.
  std::string cwd;
  /// Where tagged rank output goes, and hvdrun's own final message.
  int stdout_fd = 1;
  int stderr_fd = 2;
  /// Grace between SIGTERM and SIGKILL when ranks are stopped (HVDRUN_KILL_GRACE).
  std::chrono::milliseconds kill_grace{3000};
  /// How often the launcher and the agents say they are alive.
  std::chrono::milliseconds heartbeat_interval{1000};
  /// Silence after which a remote agent counts as lost (HVDRUN_HEARTBEAT_TIMEOUT; 0: never).
  std::chrono::milliseconds heartbeat_timeout{30000};
  /// How long a rank failure caused by a lost peer (its stderr says so) waits for the
  /// report of the rank that failed first before it becomes the job's failure (0: never
  /// waits, the first failure reported is the job's).
  std::chrono::milliseconds peer_loss_wait{2000};
};

/// The context of a real launch, without a clock: environ, the working
/// directory, stdout/stderr, HVDRUN_KILL_GRACE and HVDRUN_HEARTBEAT_TIMEOUT from `getenv`
/// (seconds; UsageError when malformed), the heartbeat period derived from the timeout.
JobContext process_context(const char* (*getenv)(const char*) = nullptr);

}  // namespace hvdrun::launcher
