// The guard process: one blocking read loop over a pipe of process-group ids, forked from
// the single-threaded agent and never exec'd. It holds nothing of the agent's but that pipe,
// so it keeps no SSH channel or launcher stream open, and it ignores the signals a dying
// session sends (SIGHUP, SIGTERM, SIGINT) so that it is still there to do its one job.
#include "launcher/process/group_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/process/job_cgroup.h"
#include "launcher/process/subprocess.h"

namespace hvdrun::launcher {
namespace {

// Sent instead of a group id when the agent ends normally.
constexpr std::int32_t kDone = 0;
// Sent instead of a group id before the length and path of the job's cgroup directory.
constexpr std::int32_t kCgroup = -1;
// Sent instead of a group id before a group id no longer to be killed.
constexpr std::int32_t kForget = -2;

// Reads exactly `size` bytes; false at EOF or on an error (the agent is gone).
bool read_full(int fd, void* data, std::size_t size) {
  std::size_t have = 0;
  while (have < size) {
    const ssize_t n = ::read(fd, static_cast<char*>(data) + have, size - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    have += static_cast<std::size_t>(n);
  }
  return true;
}

[[noreturn]] void guard_main(int from_agent) {
  for (int s : {SIGHUP, SIGTERM, SIGINT, SIGPIPE, SIGQUIT}) ::signal(s, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  if (::dup2(from_agent, 3) < 0) ::_exit(1);
  ::close_range(4, ~0u, 0);
  std::vector<pid_t> groups;
  std::string cgroup;
  std::int32_t id = 0;
  // Until the agent is gone without saying it is done.
  while (read_full(3, &id, sizeof id)) {
    if (id == kDone) ::_exit(0);
    if (id == kForget) {
      std::int32_t pgid = 0;
      if (!read_full(3, &pgid, sizeof pgid)) break;
      groups.erase(std::remove(groups.begin(), groups.end(), pgid), groups.end());
      continue;
    }
    if (id != kCgroup) {
      groups.push_back(id);
      continue;
    }
    std::uint32_t size = 0;
    if (!read_full(3, &size, sizeof size)) break;
    std::string dir(size, '\0');
    if (!read_full(3, dir.data(), size)) break;
    cgroup = std::move(dir);
  }
  // Each is the group of a rank the agent had not reaped, so still the rank's: its leader
  // lives, or is a zombie whose pid (the group's id) is not given out again until reaped,
  // which its new parent does only now that the agent is gone; and pids are handed out in
  // a cycle, so the id is not reused in the moment before this kill. Groups of reaped ranks
  // were forgotten: their members, if any, are reached through the cgroup below.
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  // What the ranks started in sessions of their own left the groups, but not the cgroup.
  if (!cgroup.empty())
    kill_cgroup(cgroup, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  ::_exit(0);
}

}  // namespace

GroupGuard::GroupGuard() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("starting the rank group guard", "pipe2");
  UniqueFd r(p[0]);
  to_guard_.reset(p[1]);
  ChildSpec spec;
  spec.what = "the rank group guard";
  // guard_main keeps only the read end (close_range drops the write end in the child).
  spec.main = [from_agent = r.get()]() -> int { guard_main(from_agent); };
  // It stays in the agent's process group and outlives the agent on purpose.
  spec.own_group = false;
  pid_ = spawn(spec).pid;
}

GroupGuard::~GroupGuard() { release(); }

void GroupGuard::watch(pid_t pgid) {
  if (!to_guard_ || pgid <= 0) return;
  std::int32_t id = pgid;
  // Four bytes into an empty-enough pipe: atomic. A failed write means the guard is gone,
  // which leaves the ranks to PR_SET_PDEATHSIG alone, as before the guard existed.
  (void)!::write(to_guard_.get(), &id, sizeof id);
}

void GroupGuard::forget(pid_t pgid) {
  if (!to_guard_ || pgid <= 0) return;
  // One write of eight bytes: atomic, so the guard never reads half of it.
  const std::int32_t message[2] = {kForget, pgid};
  (void)!::write(to_guard_.get(), message, sizeof message);
}

void GroupGuard::watch_cgroup(const std::string& dir) {
  if (!to_guard_ || dir.empty() || dir.size() > 2048) return;
  // One write of at most PIPE_BUF bytes: atomic, like watch()'s.
  std::string message(sizeof(std::int32_t) + sizeof(std::uint32_t), '\0');
  const std::int32_t id = kCgroup;
  const auto size = static_cast<std::uint32_t>(dir.size());
  std::memcpy(message.data(), &id, sizeof id);
  std::memcpy(message.data() + sizeof id, &size, sizeof size);
  message += dir;
  (void)!::write(to_guard_.get(), message.data(), message.size());
}

void GroupGuard::release() {
  if (!to_guard_) return;
  std::int32_t done = kDone;
  (void)!::write(to_guard_.get(), &done, sizeof done);
  to_guard_.reset();
  if (pid_ > 0) {
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

}  // namespace hvdrun::launcher
