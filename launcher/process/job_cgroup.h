// A cgroup v2 per job on each host, where the hierarchy lets the agent make one. The
// subreaper (launcher/process/reaper.h) catches what ranks start in sessions of their own while the
// agent lives; a cgroup holds them whatever their parent or session, and is emptied by one
// write to cgroup.kill, even by the rank group guard after the agent itself was SIGKILLed.
// Where cgroup v2 is absent or not writable (most unprivileged users outside a delegated
// subtree), the job runs as before: nothing fails for want of a cgroup.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"

namespace hvdrun::launcher {

/// Where a cgroup v2 hierarchy is mounted: its root within the hierarchy (mountinfo's
/// fourth field, "/" unless a subtree is bind-mounted) and its mount point.
struct Cgroup2Mount {
  std::string root;
  std::string mount_point;
};

/// The first cgroup2 mount in the text of /proc/self/mountinfo (octal escapes such as
/// \040 decoded), or nullopt.
std::optional<Cgroup2Mount> find_cgroup2_mount(std::string_view mountinfo);

/// The path of the "0::" line of /proc/self/cgroup (this process's cgroup v2), or nullopt.
std::optional<std::string> own_cgroup2_path(std::string_view proc_cgroup);

/// The directory of cgroup `path` under `mount`, or nullopt when the mount does not show it
/// (another subtree is mounted there).
std::optional<std::string> cgroup_dir(const Cgroup2Mount& mount, const std::string& path);

/// Empties the cgroup at `dir` and removes it: writes 1 to cgroup.kill (Linux 5.14 and
/// later) or, where that file is absent or `use_kill_file` is false, freezes the cgroup and
/// SIGKILLs every process in cgroup.procs; then waits until cgroup.events says
/// "populated 0" and rmdirs it. Gives up at `deadline`. Returns an empty string on success,
/// else what went wrong. Safe in a forked child of a single-threaded process.
std::string kill_cgroup(const std::string& dir, std::chrono::steady_clock::time_point deadline,
                        bool use_kill_file = true);

/// The directory of this process's own cgroup v2, or nullopt with the reason in `why_not`.
std::optional<std::string> own_cgroup_dir(std::string& why_not);

/// Removes every empty cgroup in this process's own cgroup whose name starts with `prefix`
/// ("hvdrun-JOB-"): the launcher's sweep of what its local agents left, an agent killed
/// together with its guard (whose processes the launcher, their subreaper, has killed).
/// A cgroup that still holds a process stays. Returns how many it removed.
int remove_empty_job_cgroups(const std::string& prefix);

/// The pids in the cgroup at `dir` (its cgroup.procs); empty when it cannot be read.
std::vector<pid_t> cgroup_pids(const std::string& dir);

/// One job's cgroup on this host: a leaf below this process's own cgroup. Owns the
/// directory: the destructor empties and removes it (kill_cgroup).
class JobCgroup {
 public:
  /// Makes the cgroup `name` (e.g. hvdrun-JOB-PID) and checks that a child can join it.
  /// Returns nullopt, and says why in `why_not`, where that cannot be done. Starts a short
  /// probe process: only from a single-threaded process.
  static std::optional<JobCgroup> create(const std::string& name, std::string& why_not);
  ~JobCgroup();
  JobCgroup(JobCgroup&& other) noexcept;
  /// Removes the cgroup held (as the destructor does), then takes `other`'s.
  JobCgroup& operator=(JobCgroup&& other) noexcept;
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  /// The cgroup's directory (e.g. /sys/fs/cgroup/hvdrun-7-42).
  const std::string& dir() const { return dir_; }
  /// Its cgroup.procs, open for writing: a child that writes "0" to it joins the cgroup
  /// (ChildSpec::cgroup_procs_fd).
  int procs_fd() const { return procs_.get(); }
  /// The directory itself, open: a child started by fork_into_cgroup with it begins in the
  /// cgroup (ChildSpec::cgroup_dir_fd).
  int dir_fd() const { return dir_fd_.get(); }
  /// Empties and removes the cgroup now (the destructor's work); returns kill_cgroup's
  /// verdict. Idempotent.
  std::string remove(std::chrono::steady_clock::time_point deadline, bool use_kill_file = true);

 private:
  JobCgroup(std::string dir, UniqueFd procs) : dir_(std::move(dir)), procs_(std::move(procs)) {}
  // remove() with a 5 s deadline, a failure logged.
  void release_now() noexcept;

  std::string dir_;
  UniqueFd procs_;
  UniqueFd dir_fd_;
};

}  // namespace hvdrun::launcher
