// Child subreaper and the teardown of adopted processes. Children are read from each
// thread's /proc/self/task/TID/children, or, on a kernel without CONFIG_PROC_CHILDREN, found
// by scanning /proc/PID/stat for this process as parent; both see children of every thread.
#include "launcher/process/reaper.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "launcher/process/job_cgroup.h"

namespace hvdrun::launcher {
namespace {

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

// The state and parent of `pid` from /proc/PID/stat; false when it is gone.
bool stat_of(pid_t pid, char& state, pid_t& ppid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "PID (comm) S PPID ...": comm may hold spaces and parentheses; the last ')' ends it.
  const char* close = nullptr;
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] == ')') close = buf + i;
  if (close == nullptr || close + 4 > buf + n) return false;
  state = close[2];
  ppid = static_cast<pid_t>(std::strtol(close + 4, nullptr, 10));
  return true;
}

}  // namespace

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

namespace {

// The children of every thread of this process from /proc/self/task/TID/children
// (CONFIG_PROC_CHILDREN), zombies included; false when the kernel has no such file. Reads
// a handful of files, where the scan below reads one per process of the machine: with a
// thousand agents on one machine (a benchmark, a fat node) that scan made each agent's
// teardown cost O(processes), and all of them O(N^2).
bool children_from_task_lists(std::vector<pid_t>& out) {
  std::unique_ptr<DIR, DirCloser> tasks(::opendir("/proc/self/task"));
  if (!tasks) return false;
  bool any = false;
  while (dirent* e = ::readdir(tasks.get())) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    any = true;
    std::string text;
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    const char* p = text.c_str();
    char* end = nullptr;
    for (long pid = std::strtol(p, &end, 10); end != p; pid = std::strtol(p, &end, 10)) {
      out.push_back(static_cast<pid_t>(pid));
      p = end;
    }
  }
  return any;
}

// Every process whose parent is this one, found by reading each /proc/PID/stat.
std::vector<pid_t> children_by_scan() {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  std::unique_ptr<DIR, DirCloser> proc(::opendir("/proc"));
  if (!proc) return out;
  while (dirent* e = ::readdir(proc.get())) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    char state = 0;
    pid_t ppid = 0;
    if (stat_of(static_cast<pid_t>(pid), state, ppid) && ppid == self)
      out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

std::vector<pid_t> children(bool with_zombies) {
  std::vector<pid_t> found;
  if (!children_from_task_lists(found)) found = children_by_scan();
  if (with_zombies) return found;
  std::vector<pid_t> out;
  for (pid_t pid : found) {
    char state = 0;
    pid_t ppid = 0;
    if (stat_of(pid, state, ppid) && state != 'Z') out.push_back(pid);
  }
  return out;
}

}  // namespace

std::vector<pid_t> children_of_self() { return children(false); }

int kill_adopted(const std::vector<pid_t>& keep, std::chrono::steady_clock::time_point deadline) {
  std::vector<pid_t> killed;
  auto delay = std::chrono::microseconds(200);
  for (;;) {
    std::vector<pid_t> left;
    for (pid_t pid : children(true))
      if (std::find(keep.begin(), keep.end(), pid) == keep.end()) left.push_back(pid);
    if (left.empty() || std::chrono::steady_clock::now() >= deadline)
      return static_cast<int>(killed.size());
    for (pid_t pid : left) {
      // A stopped process dies of SIGKILL too; its children come back here next round.
      if (::kill(pid, SIGKILL) == 0 && std::find(killed.begin(), killed.end(), pid) == killed.end())
        killed.push_back(pid);
      int status = 0;
      ::waitpid(pid, &status, WNOHANG);
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20000));
  }
}

namespace {

bool is_subreaper() {
  int on = 0;
  return ::prctl(PR_GET_CHILD_SUBREAPER, &on) == 0 && on != 0;
}

}  // namespace

LauncherReaper::LauncherReaper(std::function<std::vector<pid_t>()> keep)
    : was_on_(is_subreaper()), keep_(std::move(keep)) {
  on_ = become_subreaper();
}

LauncherReaper::~LauncherReaper() {
  if (!on_) return;
  const std::vector<pid_t> keep = keep_ ? keep_() : std::vector<pid_t>{};
  kill_adopted(keep, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (!was_on_) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  // A local agent killed together with its guard (its whole process group, say) left its
  // job cgroup behind: hvdrun-JOB-AGENT beside this process, JOB being this pid.
  remove_empty_job_cgroups("hvdrun-" + std::to_string(::getpid()) + "-");
}

}  // namespace hvdrun::launcher
