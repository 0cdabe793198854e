// Loopback sshd cluster fixture (see sshd_cluster.h).
#include "tests/support/sshd_cluster.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace hvdrun::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kAddressesPerDaemon = 15;  // sshd's MAX_LISTEN_SOCKS is 16

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& content, int mode) {
  std::ofstream out(path, std::ios::trunc);
  out << content;
  out.close();
  if (!out) throw std::runtime_error("sshd cluster: cannot write " + path);
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
}

// True when a TCP connect to addr:port succeeds right now.
bool accepts(const std::string& addr, int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &sin.sin_addr);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0;
}

pid_t parent_of(pid_t pid) {
  std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  char state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && pid > 0) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

// Every process below `roots` (not the roots themselves).
std::vector<pid_t> descendants(const std::vector<pid_t>& roots) {
  std::set<pid_t> tree(roots.begin(), roots.end());
  std::vector<pid_t> out;
  bool grew = true;
  auto pids = all_pids();
  while (grew) {
    grew = false;
    for (pid_t p : pids) {
      if (tree.count(p)) continue;
      if (tree.count(parent_of(p))) {
        tree.insert(p);
        out.push_back(p);
        grew = true;
      }
    }
  }
  return out;
}

}  // namespace

int run_process(const std::vector<std::string>& argv, std::string* output) {
  auto [rd, wr] = make_pipe();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(wr.get(), 1);
    ::dup2(wr.get(), 2);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  wr.reset();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output) output->append(buf, static_cast<std::size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int unused_port() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) < 0)
    throw std::runtime_error("bind failed");
  socklen_t len = sizeof sin;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  return ntohs(sin.sin_port);
}

SilentListener::SilentListener() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) < 0 ||
      ::listen(fd_.get(), 64) < 0) {
    throw std::runtime_error("silent listener: bind/listen failed");
  }
  socklen_t len = sizeof sin;
  ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  port_ = ntohs(sin.sin_port);
}

UnansweredListener::UnansweredListener() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) < 0 ||
      ::listen(fd_.get(), 0) < 0) {
    throw std::runtime_error("unanswered listener: bind/listen failed");
  }
  socklen_t len = sizeof sin;
  ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  port_ = ntohs(sin.sin_port);
  for (int i = 0; i < 2; ++i) {  // non-blocking: the second one is left hanging by design
    UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    (void)::connect(c.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin);  // EINPROGRESS
    fillers_.push_back(std::move(c));
  }
  // Wait (bounded) until the first filler is established, so the queue is really full.
  pollfd pfd{fillers_[0].get(), POLLOUT, 0};
  ::poll(&pfd, 1, 2000);
}

SshAgent::SshAgent(const std::string& dir) : dir_(dir), socket_(dir + "/agent.sock") {
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("ssh-agent: fork failed");
  if (pid_ == 0) {
    int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execlp("ssh-agent", "ssh-agent", "-D", "-a", socket_.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The agent gives no readiness signal: retry connecting to its socket until a deadline.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::snprintf(sun.sun_path, sizeof sun.sun_path, "%s", socket_.c_str());
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sun), sizeof sun) == 0) return;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_ || Clock::now() > deadline) {
      pid_ = -1;
      throw std::runtime_error("ssh-agent did not start");
    }
    pollfd none{};
    ::poll(&none, 0, 5);
  }
}

SshAgent::~SshAgent() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void SshAgent::add(const std::string& key, const std::string& passphrase) {
  const std::string askpass = dir_ + "/askpass.sh";
  write_text(askpass, "#!/bin/sh\necho '" + passphrase + "'\n", 0700);
  std::string out;
  int st = run_process({"env", "SSH_AUTH_SOCK=" + socket_, "SSH_ASKPASS=" + askpass,
                        "SSH_ASKPASS_REQUIRE=force", "DISPLAY=none", "ssh-add", key},
                       &out);
  if (st != 0) throw std::runtime_error("ssh-add " + key + " failed: " + out);
}

SshdCluster::SshdCluster(int hosts, std::vector<std::string> session_env)
    : session_env_(std::move(session_env)), hosts_(hosts) {
  if (hosts < 1 || hosts > 254) throw std::runtime_error("sshd cluster: 1 to 254 hosts");
  char tmpl[] = "/tmp/hvdrun-sshd-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("sshd cluster: mkdtemp failed");
  dir_ = tmpl;
  ::mkdir("/run/sshd", 0755);
  try {
    for (const char* key : {"host_key", "user_key"}) {
      std::string out;
      int st = run_process({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                            std::string("hvdrun-test-") + key, "-f", dir_ + "/" + key},
                           &out);
      if (st != 0) throw std::runtime_error("sshd cluster: ssh-keygen failed: " + out);
    }
    user_key_ = dir_ + "/user_key";
    known_hosts_ = dir_ + "/known_hosts";
    write_text(known_hosts_, "", 0600);
    host_public_key_ = read_text(dir_ + "/host_key.pub");
    while (!host_public_key_.empty() && host_public_key_.back() == '\n')
      host_public_key_.pop_back();
    write_text(dir_ + "/authorized_keys", read_text(dir_ + "/user_key.pub"), 0600);
    start_daemons();
    std::ostringstream cfg;
    for (int k = 1; k <= hosts_; ++k) {
      cfg << "Host " << alias(k) << "\n"
          << "  HostName " << address(k) << "\n"
          << "  Port " << port_ << "\n"
          << "  User root\n"
          << "  IdentityFile " << user_key_ << "\n"
          << "  IdentitiesOnly yes\n"
          << "  UserKnownHostsFile " << known_hosts_ << "\n"
          << "  GlobalKnownHostsFile /dev/null\n"
          << "  StrictHostKeyChecking accept-new\n"
          << "  BatchMode yes\n"
          << "  LogLevel ERROR\n";
    }
    ssh_config_ = write_file("ssh_config", cfg.str(), 0600);
  } catch (...) {
    stop_daemons();
    std::filesystem::remove_all(dir_);
    throw;
  }
}

SshdCluster::~SshdCluster() {
  stop_daemons();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string SshdCluster::alias(int k) const { return "node" + std::to_string(k); }
std::string SshdCluster::address(int k) const { return "127.0.0." + std::to_string(k); }

launcher::LaunchOptions SshdCluster::options(int n) const {
  launcher::LaunchOptions o;
  for (int k = 1; k <= n; ++k) o.hosts.push_back({alias(k), 1});
  o.ssh_config = ssh_config_;
  o.start_timeout_s = 20;
  return o;
}

std::string SshdCluster::write_file(const std::string& name, const std::string& content,
                                    int mode) const {
  std::string path = dir_ + "/" + name;
  write_text(path, content, mode);
  return path;
}

void SshdCluster::start_daemons() {
  const int groups = (hosts_ + kAddressesPerDaemon - 1) / kAddressesPerDaemon;
  for (int attempt = 1;; ++attempt) {
    port_ = unused_port();
    bool started = true;
    std::string failure;
    for (int g = 0; g < groups && started; ++g) {
      std::ostringstream cfg;
      cfg << "Port " << port_ << "\n";
      for (int k = g * kAddressesPerDaemon + 1;
           k <= std::min(hosts_, (g + 1) * kAddressesPerDaemon); ++k) {
        cfg << "ListenAddress " << address(k) << "\n";
      }
      cfg << "HostKey " << dir_ << "/host_key\n"
          << "AuthorizedKeysFile " << dir_ << "/authorized_keys\n"
          << "UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n"
          << "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
          << "PubkeyAuthentication yes\nUseDNS no\nPidFile none\nLogLevel ERROR\n"
          << "MaxStartups 1000:100:1000\nMaxSessions 1000\nMaxAuthTries 20\nLoginGraceTime 60\n"
          // Sessions start with SHLVL=1, so bash (one level deeper) skips ~/.bashrc: the
          // tests examine hvdrun, not this machine's start-up files, which can write to
          // stderr (root's here runs `pyenv init`, whose shim rehash fails with a message
          // when hosts log in at the same moment) and cost 0.4 s per login. Start-up noise
          // is tested on its own, with the scripted SSH layer (preflight_fake_test).
          // LC_TIME: a locale variable that sessions get from the host, as a site's login
          // sets them (remote_test: a rank takes its host's, not the launcher's).
          << "SetEnv SHLVL=1 LC_TIME=C.UTF-8";
      for (const auto& e : session_env_) cfg << " " << e;
      cfg << "\n";
      const std::string cfg_path = write_file("sshd_config." + std::to_string(g), cfg.str(), 0600);
      const std::string log_path = dir_ + "/sshd." + std::to_string(g) + ".log";
      pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("sshd cluster: fork failed");
      if (pid == 0) {
        int null = ::open("/dev/null", O_RDONLY);
        int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(null, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        ::execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", cfg_path.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      daemons_.push_back(pid);
      // Wait until every address of this daemon accepts, or the daemon dies.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      int k = g * kAddressesPerDaemon + 1;
      const int last = std::min(hosts_, (g + 1) * kAddressesPerDaemon);
      while (k <= last) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          daemons_.back() = -1;
          started = false;
          failure = read_text(log_path);
          break;
        }
        if (accepts(address(k), port_)) {
          ++k;
          continue;
        }
        if (Clock::now() > deadline) {
          started = false;
          failure = "sshd did not accept on " + address(k) + ":" + std::to_string(port_) +
                    " within 10 s: " + read_text(log_path);
          break;
        }
        pollfd none{};
        ::poll(&none, 0, 5);  // sshd gives no readiness signal; re-try the connect shortly
      }
    }
    if (started) return;
    stop_daemons();
    if (attempt == 3) throw std::runtime_error("sshd cluster: cannot start sshd: " + failure);
  }
}

void SshdCluster::stop_daemons() noexcept {
  std::vector<pid_t> live;
  for (pid_t p : daemons_) {
    if (p > 0) live.push_back(p);
  }
  for (pid_t p : descendants(live)) ::kill(p, SIGKILL);
  for (pid_t p : live) {
    ::kill(p, SIGTERM);
    int status = 0;
    while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
    }
  }
  daemons_.clear();
}

std::vector<pid_t> SshdCluster::session_pids(int k) const {
  // Established connections whose local end is 127.0.0.k:port, by socket inode.
  in_addr a{};
  ::inet_pton(AF_INET, address(k).c_str(), &a);
  char local[32];
  std::snprintf(local, sizeof local, "%08X:%04X", a.s_addr, port_);
  std::set<std::string> inodes;
  std::istringstream tcp(read_text("/proc/net/tcp"));
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream f(line);
    std::string sl, loc, rem, st, queues, tr, retr, uid, timeout, inode;
    f >> sl >> loc >> rem >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
    if (loc == local && st == "01") inodes.insert("socket:[" + inode + "]");
  }
  std::vector<pid_t> live;
  for (pid_t p : daemons_) {
    if (p > 0) live.push_back(p);
  }
  std::vector<pid_t> out;
  for (pid_t p : descendants(live)) {
    const std::string fd_dir = "/proc/" + std::to_string(p) + "/fd";
    DIR* d = ::opendir(fd_dir.c_str());
    if (d == nullptr) continue;
    bool serving = false;
    while (dirent* e = ::readdir(d)) {
      char target[64];
      ssize_t n = ::readlink((fd_dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (inodes.count(target)) serving = true;
    }
    ::closedir(d);
    if (serving) out.push_back(p);
  }
  return out;
}

int SshdCluster::kill_sessions(int k, int sig) const {
  int n = 0;
  for (pid_t p : session_pids(k)) n += ::kill(p, sig) == 0 ? 1 : 0;
  return n;
}

}  // namespace hvdrun::testing
