// Ranks' descendants are the job's: a process a rank starts in a session of its own
// (`setsid`, Python's start_new_session=True, a daemon's double fork) leaves the rank's
// process group, so killing the group misses it. Made a child subreaper, the agent
// inherits such orphans instead of init, and at teardown kills every process it adopted.
// The launcher is one too, for the orphans of a local agent that was itself killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <vector>

namespace hvdrun::launcher {

/// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER).
/// Returns false (errno set) where the kernel refuses.
bool become_subreaper();

/// This process's live children (zombies excluded), from /proc.
std::vector<pid_t> children_of_self();

/// SIGKILLs every child of this process but those in `keep`, reaps them, and repeats while
/// that brings more (the grandchildren of a killed child come back here), until none is
/// left or `deadline`. Returns how many processes it killed.
int kill_adopted(const std::vector<pid_t>& keep, std::chrono::steady_clock::time_point deadline);

/// The launcher's share: while alive this process is a child subreaper, so that what a
/// local rank left running when its agent was killed comes here; the destructor kills every
/// child still there (the job's own children are gone by then), turns the role off unless
/// it was on before (an enclosing LauncherReaper: elastic mode has one around all its
/// generations), and removes the empty job cgroups its local agents left
/// (remove_empty_job_cgroups).
class LauncherReaper {
 public:
  /// `keep` names, when the sweep runs, children that are not to be killed (the caller's
  /// own, which outlive the launch).
  explicit LauncherReaper(std::function<std::vector<pid_t>()> keep = {});
  ~LauncherReaper();
  LauncherReaper(const LauncherReaper&) = delete;
  LauncherReaper& operator=(const LauncherReaper&) = delete;

 private:
  bool on_ = false;
  bool was_on_ = false;
  std::function<std::vector<pid_t>()> keep_;
};

}  // namespace hvdrun::launcher
