// Process helpers for end-to-end tests (see processes.h).
#include "tests/support/processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/deadline.h"

extern char** environ;

namespace hvdrun::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ...; empty when
// the process is gone.
std::vector<std::string> stat_fields(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return {};
  std::istringstream rest(stat.substr(paren + 2));
  std::vector<std::string> fields;
  for (std::string f; fields.size() < 3 && rest >> f;) fields.push_back(f);
  return fields;
}

// Every numeric entry of /proc.
std::vector<pid_t> all_pids() {
  std::vector<pid_t> pids;
  DIR* d = ::opendir("/proc");
  if (!d) return pids;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return pids;
}

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

}  // namespace

std::string hvdrun_binary() { return HVDRUN_BINARY_DIR "/cli/hvdrun"; }

CapturedProcess::CapturedProcess(std::vector<std::string> argv, std::vector<std::string> extra_env,
                                 const std::string& cwd) {
  if (argv.empty()) throw std::runtime_error("CapturedProcess: empty argv");
  auto [out_r, out_w] = make_pipe();
  auto [err_r, err_w] = make_pipe();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    bool replaced = false;
    for (const auto& x : extra_env) replaced = replaced || name_of(x) == name_of(entry);
    if (!replaced) env.push_back(std::move(entry));
  }
  for (auto& e : extra_env) env.push_back(std::move(e));
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("CapturedProcess: fork failed");
  if (pid_ == 0) {
    ::dup2(out_w.get(), 1);
    ::dup2(err_w.get(), 2);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::execvpe(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  out_fd_ = std::move(out_r);
  err_fd_ = std::move(err_r);
}

CapturedProcess::~CapturedProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void CapturedProcess::read_until(const std::function<bool(const std::string&)>& pred,
                                 std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  while (!pred(out)) {
    if (Clock::now() >= deadline) {
      throw std::runtime_error("awaited output did not come within " +
                               std::to_string(within.count()) + " ms; stdout so far:\n" +
                               out.substr(0, 2000) + "\nstderr so far:\n" + err.substr(0, 4000));
    }
    if (!pump(deadline)) {
      throw std::runtime_error("output ended before the awaited text; stdout:\n" +
                               out.substr(0, 2000) + "\nstderr:\n" + err.substr(0, 4000));
    }
  }
}

int CapturedProcess::wait(std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  while (Clock::now() < deadline && pump(deadline)) {
  }
  int status = 0;
  for (;;) {
    rusage usage{};
    pid_t r = ::wait4(pid_, &status, WNOHANG, &usage);
    if (r == pid_) {
      max_rss_kib_ = usage.ru_maxrss;
      break;
    }
    if (Clock::now() >= deadline) {
      throw std::runtime_error("process " + std::to_string(pid_) + " did not end within " +
                               std::to_string(within.count()) + " ms; stderr so far:\n" +
                               err.substr(0, 4000));
    }
    std::this_thread::sleep_for(1ms);
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void CapturedProcess::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

bool CapturedProcess::pump(Clock::time_point deadline) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_) fds[n++] = {out_fd_.get(), POLLIN, 0};
  if (err_fd_) fds[n++] = {err_fd_.get(), POLLIN, 0};
  if (n == 0) return false;
  const long long left = ms_left(deadline);
  if (left == 0) return true;
  ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(left));
  char buf[1 << 16];
  for (int i = 0; i < n; ++i) {
    if (!fds[i].revents) continue;
    bool is_out = out_fd_ && fds[i].fd == out_fd_.get();
    UniqueFd& fd = is_out ? out_fd_ : err_fd_;
    std::string& dst = is_out ? out : err;
    ssize_t got = ::read(fd.get(), buf, sizeof buf);
    if (got > 0 && is_out && sink_) {
      sink_(std::string_view(buf, static_cast<std::size_t>(got)));
    } else if (got > 0) {
      dst.append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      fd.reset();
    }
  }
  return true;
}

namespace {
std::vector<std::string> with_binary(std::vector<std::string> args) {
  args.insert(args.begin(), hvdrun_binary());
  return args;
}
}  // namespace

Hvdrun::Hvdrun(std::vector<std::string> args, std::vector<std::string> extra_env,
               const std::string& cwd)
    : CapturedProcess(with_binary(std::move(args)), std::move(extra_env), cwd) {}

TempDir::TempDir(const std::string& tag) {
  std::string tmpl = "/tmp/hvdrun-" + tag + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp " + tmpl + " failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

int as_nobody(const std::string& script) {
  CapturedProcess p({"runuser", "-u", "nobody", "--", "sh", "-c", script});
  const int rc = p.wait();
  if (rc != 0) std::cerr << "as nobody: " << script << ": exit " << rc << ": " << p.err << "\n";
  return rc;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

std::string without_outside_connections(const std::string& err) {
  // The launcher's rate-limited warnings about connections that are not the job's
  // (rendezvous/server.cc, compat/horovod_http_server.cc, common/log_limiter.cc).
  static const char* const kOutside[] = {
      "rendezvous: too many connections that have not authenticated",
      "rendezvous: rejected client ",
      "Horovod rendezvous: refused a request from ",
      "Horovod rendezvous: too many connections without a complete request",
      "Horovod rendezvous: cannot tell who is calling",
      // The limiter's closing counts, by cause.
      " more of 'unauthenticated cap' since",
      " more of 'wrong job secret' since",
      " more of 'pending cap' since",
      " more of 'no peer' since",
      " more of 'unknown caller' since",
      " more of 'another user' since",
      " more of 'another host' since",
      // The shared pre-authentication gate's causes (common/preauth_gate.cc).
      " more of 'too many connections ",
      " more of 'wrong job secret' since",
      " more of 'wrong secret' since",
      " more of 'oversized hello' since",
      " more of 'relayed' since",
  };
  std::string kept;
  for (const auto& line : lines(err)) {
    const bool outside =
        line.find("[warning] ") != std::string::npos &&
        std::any_of(std::begin(kOutside), std::end(kOutside),
                    [&](const char* what) { return line.find(what) != std::string::npos; });
    if (!outside) kept += line + "\n";
  }
  return kept;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool take(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

bool take_int(std::string_view& s, int& value) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc()) return false;
  value = v;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return true;
}

long rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

bool alive(pid_t pid) {
  auto f = stat_fields(pid);
  return !f.empty() && f[0] != "Z" && f[0] != "X";
}

std::vector<pid_t> processes_in_group(pid_t pgid) {
  std::vector<pid_t> found;
  for (pid_t pid : all_pids()) {
    auto f = stat_fields(pid);
    if (f.size() == 3 && f[0] != "Z" && f[0] != "X" && std::stol(f[2]) == pgid)
      found.push_back(pid);
  }
  return found;
}

std::vector<pid_t> processes_with(const std::string& marker) {
  std::vector<pid_t> found;
  for (pid_t pid : all_pids()) {
    if (!alive(pid)) continue;
    std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
    if (env.find(marker) != std::string::npos) found.push_back(pid);
  }
  return found;
}

std::vector<pid_t> processes_with_cmdline(const std::string& text, int* scanned) {
  std::vector<pid_t> found;
  int seen = 0;
  for (pid_t pid : all_pids()) {
    ++seen;
    std::string cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find(text) != std::string::npos) found.push_back(pid);
  }
  if (scanned) *scanned = seen;
  return found;
}

std::string unique_marker() {
  std::random_device rd;
  return "HVDRUN_TEST_MARKER=" + std::to_string(::getpid()) + "-" + std::to_string(rd());
}

bool wait_none_alive(const std::vector<pid_t>& pids, std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  for (pid_t pid : pids) {
    while (alive(pid)) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
  }
  return true;
}

bool wait_none_with(const std::string& marker, std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  while (!processes_with(marker).empty()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

pid_t read_pid_file(const std::string& path, std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  for (;;) {
    std::string text = read_file(path);
    if (!text.empty() && text.back() == '\n') return static_cast<pid_t>(std::stol(text));
    if (Clock::now() > deadline)
      throw std::runtime_error("no pid in " + path + " within " + std::to_string(within.count()) +
                               " ms");
    std::this_thread::sleep_for(5ms);
  }
}

std::vector<pid_t> read_pid_files(const std::string& dir, const std::string& prefix, int n,
                                  std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pids.push_back(read_pid_file(dir + "/" + prefix + std::to_string(i),
                                 std::chrono::milliseconds(ms_left(deadline))));
  }
  return pids;
}

void report_fault(const FaultFigure& f) {
  std::printf("fault-matrix: %s | %s | %.0f | %d | %s\n", f.fault.c_str(), f.outcome.c_str(),
              f.detect_ms, f.left_running, f.lost.c_str());
  std::fflush(stdout);
}

}  // namespace hvdrun::testing
