// A watchdog for the agent's rank process groups. Ranks die with their agent
// (PR_SET_PDEATHSIG), but what a rank started itself (a shell's children, data loader
// workers) shares the rank's process group and would outlive a SIGKILLed agent, since only
// the agent knows to kill the groups. The guard is a small process forked from the agent
// that learns every rank's process group (and the job's cgroup, where there is one) over a
// pipe and, when that pipe ends without the agent's "done" (the agent was killed, by the OOM
// killer or anyone), SIGKILLs each group and empties the cgroup.
//
// A group id is a number the kernel hands out again once nothing uses it, so the guard must
// only kill groups that are still the ranks': the agent tells it to forget a rank's group
// before it reaps the rank (see Agent::reap).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/fd.h"

namespace hvdrun::launcher {

class GroupGuard {
 public:
  /// Forks the guard. Throws SystemError when the pipe or the fork fails.
  GroupGuard();
  /// Releases the guard (see release()).
  ~GroupGuard();
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;

  /// The guard's pid (to tell it apart when reaping children).
  pid_t pid() const { return pid_; }
  /// Adds a rank's process group to those killed if the agent dies.
  void watch(pid_t pgid);
  /// Removes a group watch() added: to be called before its leader is reaped, while the
  /// leader's zombie still holds the id, since after that the id may name anyone's group.
  void forget(pid_t pgid);
  /// Adds the job's cgroup (JobCgroup::dir): emptied and removed if the agent dies, which
  /// reaches what the ranks started outside their groups, their subreaper being gone.
  void watch_cgroup(const std::string& dir);
  /// The agent has ended every group itself: the guard exits without killing, and this
  /// waits for it. Idempotent.
  void release();

 private:
  UniqueFd to_guard_;
  pid_t pid_ = -1;
};

}  // namespace hvdrun::launcher
