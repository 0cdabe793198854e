// The job's socket for `hvdrun stacks` and the subcommand's client (stacks_socket.h).
#include "launcher/job/stacks_socket.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"

namespace hvdrun::launcher {

namespace {

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw LaunchError("the job's socket path " + path + " is too long for a Unix socket; set " +
                      "XDG_RUNTIME_DIR to a shorter directory");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

UniqueFd unix_socket() {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("a Unix socket for the stack report", "socket");
  return fd;
}

// The pids of the jobs whose sockets are in `dir`, ascending.
std::vector<int> job_pids(const std::string& dir) {
  std::vector<int> pids;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      static constexpr std::string_view kHead = "job-", kTail = ".sock";
      if (name.size() <= kHead.size() + kTail.size() || name.rfind(kHead, 0) != 0 ||
          name.compare(name.size() - kTail.size(), kTail.size(), kTail) != 0)
        continue;
      const std::string digits =
          name.substr(kHead.size(), name.size() - kHead.size() - kTail.size());
      if (digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos)
        pids.push_back(std::stoi(digits));
    }
    ::closedir(d);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::string socket_path(const std::string& dir, int pid) {
  return dir + "/job-" + std::to_string(pid) + ".sock";
}

// Connected to the job of `pid`, or empty when nothing listens there (a job that ended
// without removing its socket: SIGKILL).
UniqueFd connect_job(const std::string& dir, int pid) {
  UniqueFd fd = unix_socket();
  const sockaddr_un a = address(socket_path(dir, pid));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) return {};
  return fd;
}

}  // namespace

std::string stacks_socket_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  std::string dir = runtime != nullptr && *runtime == '/'
                        ? std::string(runtime) + "/hvdrun"
                        : "/tmp/hvdrun-" + std::to_string(::getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) throw_errno(dir, "mkdir");
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw_errno(dir, "lstat");
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
    throw LaunchError(dir + " is not a directory of uid " + std::to_string(::getuid()) +
                      " with mode 0700; remove it (another user may have made it)");
  }
  return dir;
}

StacksSocket::StacksSocket() : path_(socket_path(stacks_socket_dir(), ::getpid())) {
  listen_ = unix_socket();
  ::unlink(path_.c_str());  // a former hvdrun of this pid's, killed
  const sockaddr_un a = address(path_);
  if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0)
    throw_errno(path_, "bind");
  if (::listen(listen_.get(), 8) != 0) throw_errno(path_, "listen");
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) inode_ = st.st_ino;
  set_nonblocking(listen_.get());
}

StacksSocket::~StacksSocket() {
  // Only its own: a later job of this process (an elastic job's next run) may listen there.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_ino == inode_) ::unlink(path_.c_str());
}

UniqueFd StacksSocket::accept_client() {
  for (;;) {
    UniqueFd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) return {};  // EAGAIN: none waits (or one gave up)
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::getuid()) {
      static constexpr char kRefused[] =
          "hvdrun: refused: this job belongs to another user; only its owner can ask for its "
          "stacks\n";
      (void)write_all(c.get(), kRefused, sizeof kRefused - 1);
      continue;
    }
    timeval limit{2, 0};
    ::setsockopt(c.get(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    return c;
  }
}

int run_stacks_client(std::optional<int> pid) {
  const std::string dir = stacks_socket_dir();
  UniqueFd fd;
  if (pid) {
    fd = connect_job(dir, *pid);
    if (!fd) {
      std::fprintf(stderr, "hvdrun stacks: no running hvdrun job of yours has pid %d (%s)\n", *pid,
                   socket_path(dir, *pid).c_str());
      return 2;
    }
  } else {
    std::vector<int> live;
    for (int p : job_pids(dir)) {
      if (UniqueFd c = connect_job(dir, p)) {
        live.push_back(p);
        fd = std::move(c);
      }
    }
    if (live.size() != 1) {
      std::string msg = "hvdrun stacks: no running hvdrun job of yours (" + dir + ")\n";
      if (!live.empty()) {
        std::string pids;
        for (int p : live) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
        msg = "hvdrun stacks: " + std::to_string(live.size()) +
              " jobs of yours are running (hvdrun pids " + pids +
              "): name one, as in hvdrun stacks " + std::to_string(live[0]) + "\n";
      }
      std::fputs(msg.c_str(), stderr);
      return 2;
    }
  }
  // The report comes within the agents' wait and a few seconds more.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  std::string got;
  for (;;) {
    const int left = poll_ms_left(deadline);
    pollfd p{fd.get(), POLLIN, 0};
    if (left == 0 || ::poll(&p, 1, left) == 0) break;
    char buf[1 << 16];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  (void)write_all(1, got.data(), got.size());
  if (got.empty()) {
    std::fprintf(stderr, "hvdrun stacks: the job sent no report within 15 s\n");
    return 1;
  }
  return 0;
}

}  // namespace hvdrun::launcher
