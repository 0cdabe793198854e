// The job's cgroup: found from /proc/self/mountinfo and /proc/self/cgroup, made with mkdir,
// joined by each rank between fork and exec (it writes "0" to cgroup.procs, so no rank runs
// a single instruction of its program outside), emptied with cgroup.kill. Everything here
// uses plain system calls so that the rank group guard, a forked copy of the
// single-threaded agent, can empty the cgroup too.
#include "launcher/process/job_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <utility>

#include "launcher/process/subprocess.h"

namespace hvdrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// At most `limit` bytes of a (proc or cgroup) file; empty when it cannot be read.
std::string read_small(const std::string& path, std::size_t limit = 1u << 20) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::string out;
  if (!fd) return out;
  char buf[4096];
  while (out.size() < limit) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// Writes `text` to an existing file (a cgroup control file); false with errno set.
bool write_control(const std::string& path, std::string_view text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return false;
  return ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == sep) {
      if (i > start) out.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// "populated 1" or "populated 0" in cgroup.events; nullopt when it cannot be read (the
// cgroup is gone).
std::optional<bool> populated(const std::string& dir) {
  const std::string events = read_small(dir + "/cgroup.events");
  for (std::string_view line : split(events, '\n')) {
    if (line.substr(0, 10) == "populated ") return line.substr(10) != "0";
  }
  return std::nullopt;
}

}  // namespace

std::optional<Cgroup2Mount> find_cgroup2_mount(std::string_view mountinfo) {
  for (std::string_view line : split(mountinfo, '\n')) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    const std::vector<std::string_view> f = split(line, ' ');
    auto dash = std::find(f.begin(), f.end(), std::string_view("-"));
    if (f.size() < 5 || dash == f.end() || dash - f.begin() < 6 || dash + 1 == f.end()) continue;
    if (dash[1] == "cgroup2") return Cgroup2Mount{unescape(f[3]), unescape(f[4])};
  }
  return std::nullopt;
}

std::optional<std::string> own_cgroup2_path(std::string_view proc_cgroup) {
  for (std::string_view line : split(proc_cgroup, '\n')) {
    if (line.substr(0, 3) == "0::" && line.size() > 3 && line[3] == '/')
      return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::optional<std::string> cgroup_dir(const Cgroup2Mount& mount, const std::string& path) {
  std::string rest;
  if (mount.root == "/") {
    rest = path;
  } else if (path == mount.root || path.rfind(mount.root + "/", 0) == 0) {
    rest = path.substr(mount.root.size());
  } else {
    return std::nullopt;
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  return mount.mount_point + rest;
}

std::vector<pid_t> cgroup_pids(const std::string& dir) {
  std::vector<pid_t> out;
  // Named: the views that split() returns point into it.
  const std::string procs = read_small(dir + "/cgroup.procs");
  for (std::string_view line : split(procs, '\n')) {
    const long pid = std::strtol(std::string(line).c_str(), nullptr, 10);
    if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

std::string kill_cgroup(const std::string& dir, Clock::time_point deadline, bool use_kill_file) {
  // cgroup.kill reaches every process at once, including those forked meanwhile. Without
  // it, a frozen cgroup cannot fork while its pids are SIGKILLed one by one (a frozen
  // process still dies of SIGKILL).
  const bool by_file = use_kill_file && write_control(dir + "/cgroup.kill", "1");
  const bool frozen = !by_file && write_control(dir + "/cgroup.freeze", "1");
  auto delay = std::chrono::microseconds(200);
  for (;;) {
    if (!by_file) {
      for (pid_t pid : cgroup_pids(dir)) ::kill(pid, SIGKILL);
    }
    const std::optional<bool> busy = populated(dir);
    if (!busy) {
      if (::access(dir.c_str(), F_OK) != 0) return {};  // already removed
      return "cannot read " + dir + "/cgroup.events";
    }
    if (!*busy) break;
    if (Clock::now() >= deadline) {
      if (frozen) write_control(dir + "/cgroup.freeze", "0");
      return std::to_string(cgroup_pids(dir).size()) + " process(es) still in " + dir +
             " after SIGKILL";
    }
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20000));
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
    return "cannot remove " + dir + ": " + std::strerror(errno);
  return {};
}

std::optional<std::string> own_cgroup_dir(std::string& why_not) {
  const auto mount = find_cgroup2_mount(read_small("/proc/self/mountinfo"));
  if (!mount) {
    why_not = "no cgroup v2 hierarchy is mounted (/proc/self/mountinfo)";
    return std::nullopt;
  }
  const auto own = own_cgroup2_path(read_small("/proc/self/cgroup"));
  if (!own) {
    why_not = "/proc/self/cgroup has no cgroup v2 (0::) line";
    return std::nullopt;
  }
  auto dir = cgroup_dir(*mount, *own);
  if (!dir) {
    why_not = "this process's cgroup " + *own + " is outside the hierarchy mounted at " +
              mount->mount_point;
  }
  return dir;
}

int remove_empty_job_cgroups(const std::string& prefix) {
  std::string why_not;
  const auto parent = own_cgroup_dir(why_not);
  if (!parent || prefix.empty()) return 0;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(parent->c_str()), ::closedir);
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (e->d_type != DT_DIR || name.rfind(prefix, 0) != 0) continue;
    // rmdir fails (EBUSY) while a process is in it: those are not this sweep's to kill.
    const std::string dir = *parent + "/" + name;
    if (::rmdir(dir.c_str()) == 0) {
      ++removed;
    } else {
      spdlog::debug("job cgroup {} left in place: {}", dir, std::strerror(errno));
    }
  }
  return removed;
}

namespace {

// Whether a child can join the cgroup: that needs write access to the common ancestor's
// cgroup.procs as well, which mkdir did not test. A short child is started in it where the
// kernel allows (fork_into_cgroup), else it joins by writing to cgroup.procs. Empty: it can;
// else why not.
std::string try_joining(const std::string& dir, int dir_fd, int procs_fd) {
  pid_t pid = fork_into_cgroup(dir_fd);
  if (pid == 0) ::_exit(0);
  if (pid < 0) {
    ChildSpec probe;
    probe.what = "a cgroup probe";
    probe.own_group = false;
    probe.main = [procs_fd]() -> int { return ::write(procs_fd, "0", 1) == 1 ? 0 : errno; };
    try {
      pid = spawn(probe).pid;
    } catch (const std::exception& e) {
      return std::string("cannot try it: ") + e.what();  // no cgroup is no failure
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  return "a process cannot join " + dir + " (" +
         (WIFEXITED(status) ? std::strerror(WEXITSTATUS(status)) : describe_exit(status)) + ")";
}

}  // namespace

std::optional<JobCgroup> JobCgroup::create(const std::string& name, std::string& why_not) {
  const auto parent = own_cgroup_dir(why_not);
  if (!parent) return std::nullopt;
  std::string dir = *parent + "/" + name;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    why_not = "cannot create " + dir + ": " + std::strerror(errno);
    return std::nullopt;
  }
  const std::string procs_path = dir + "/cgroup.procs";
  // From here the object owns the directory: every return below that fails removes it.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  JobCgroup cg(std::move(dir), UniqueFd(::open(procs_path.c_str(), O_WRONLY | O_CLOEXEC)));
  cg.dir_fd_ = std::move(dir_fd);
  if (!cg.procs_ || !cg.dir_fd_) {
    why_not = "cannot open " + (cg.procs_ ? cg.dir_ : procs_path) + ": " + std::strerror(errno);
    return std::nullopt;
  }
  why_not = try_joining(cg.dir_, cg.dir_fd_.get(), cg.procs_.get());
  if (!why_not.empty()) return std::nullopt;
  return std::optional<JobCgroup>(std::move(cg));
}

JobCgroup::JobCgroup(JobCgroup&& other) noexcept
    : dir_(std::exchange(other.dir_, {})),
      procs_(std::move(other.procs_)),
      dir_fd_(std::move(other.dir_fd_)) {}

JobCgroup& JobCgroup::operator=(JobCgroup&& other) noexcept {
  if (this != &other) {
    release_now();
    dir_ = std::exchange(other.dir_, {});
    procs_ = std::move(other.procs_);
    dir_fd_ = std::move(other.dir_fd_);
  }
  return *this;
}

JobCgroup::~JobCgroup() { release_now(); }

void JobCgroup::release_now() noexcept {
  try {
    const std::string why = remove(Clock::now() + std::chrono::seconds(5));
    if (!why.empty()) spdlog::warn("job cgroup: {}", why);
  } catch (...) {
    // Out of memory for a message: the cgroup is as emptied as it could be.
  }
}

std::string JobCgroup::remove(Clock::time_point deadline, bool use_kill_file) {
  if (dir_.empty()) return {};
  procs_.reset();
  dir_fd_.reset();
  return kill_cgroup(std::exchange(dir_, {}), deadline, use_kill_file);
}

}  // namespace hvdrun::launcher
