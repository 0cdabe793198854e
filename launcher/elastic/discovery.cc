#include "launcher/elastic/discovery.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "common/quote.h"
#include "common/seconds_text.h"
#include "hostfile/text.h"
#include "launcher/process/subprocess.h"

namespace hvdrun::launcher {
namespace {

// A discovery script lists hosts: a few MiB is tens of thousands of them. Beyond that it
// is broken (or prints a log), and reading on would only cost memory.
constexpr std::size_t kMaxOutput = 4u << 20;
constexpr std::size_t kMaxStderrTail = 2048;

// Blanks at both ends, line ends included (a script's stderr ends with one).
std::string_view trim(std::string_view s) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

// Whether a line names its slots (`host:4`, `[::1]:4`); a bare IPv6 address has colons
// but no slots.
bool has_slots(std::string_view line) {
  if (line.front() == '[') return line.find("]:") != std::string_view::npos;
  return std::count(line.begin(), line.end(), ':') == 1;
}

// Reads what `fd` has without blocking into `to` (at most `cap` bytes in all; beyond it
// sets `over`). Returns false at EOF.
bool drain(int fd, std::string& to, std::size_t cap, bool& over) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      const auto take = std::min(static_cast<std::size_t>(n), cap - std::min(cap, to.size()));
      to.append(buf, take);
      if (take < static_cast<std::size_t>(n)) over = true;
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

}  // namespace

std::vector<hostfile::HostSlots> parse_discovery_output(std::string_view text, int slots_per_host,
                                                        std::string_view script) {
  std::vector<hostfile::HostSlots> hosts;
  // Each name's first line, for the duplicate check: a cluster-wide script prints one line
  // per node, and a scan of the hosts so far for each line made 160,000 lines take 42 s.
  // Names compare without case, as -H and --hostfile compare them.
  std::unordered_map<std::string, std::size_t> first_line;
  const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  first_line.reserve(lines);
  hosts.reserve(lines);
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = trim(line.substr(0, hash));
    if (line.empty()) continue;
    std::string entry(line);
    if (!has_slots(line)) {
      const bool bare_v6 = line.front() != '[' && line.find(':') != std::string_view::npos;
      entry = (bare_v6 ? "[" + entry + "]" : entry) + ":" + std::to_string(slots_per_host);
    }
    try {
      for (auto& h : hostfile::parse_host_list(entry)) {
        const auto [it, fresh] = first_line.emplace(hostfile::text::lower(h.name), line_no);
        if (!fresh)
          throw UsageError("host " + quote(h.name) + " is listed twice (first on line " +
                           std::to_string(it->second) + ")");
        hosts.push_back(std::move(h));
      }
    } catch (const UsageError& e) {
      throw UsageError("host discovery script " + std::string(script) + ": line " +
                       std::to_string(line_no) + " (" + quote(line) + "): " + e.what() +
                       "; expected one 'host' or 'host:slots' per line");
    }
  }
  return hosts;
}

Discovery::Discovery(std::string script, int slots_per_host, std::chrono::milliseconds timeout)
    : script_(std::move(script)), slots_per_host_(slots_per_host), timeout_(timeout) {}

Discovery::~Discovery() { stop(); }

void Discovery::stop() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  out_.reset();
  err_.reset();
}

void Discovery::start() {
  if (running()) return;
  auto [out_r, out_w] = make_pipe();
  auto [err_r, err_w] = make_pipe();
  ChildSpec spec;
  spec.what = "the host discovery script " + script_;
  spec.argv = {script_};
  spec.path = script_;
  spec.stdin_fd = -1;
  spec.stdout_fd = out_w.get();
  spec.stderr_fd = err_w.get();
  spec.death_signal = SIGKILL;
  Child child = spawn(spec);
  out_w.reset();
  err_w.reset();
  pid_ = child.pid;
  deadline_ = Clock::now() + timeout_;
  out_text_.clear();
  err_text_.clear();
  if (auto failure = read_exec_failure(child.exec_status.get())) {
    stop();
    throw UsageError("cannot run the host discovery script " + quote(script_) + ": " +
                     std::strerror(failure->error) +
                     "; expected an executable file (with a #! line and the execute bit)");
  }
  set_nonblocking(out_r.get());
  set_nonblocking(err_r.get());
  out_ = std::move(out_r);
  err_ = std::move(err_r);
}

std::optional<DiscoveryResult> Discovery::poll() {
  if (!running()) return std::nullopt;
  bool over = false;
  bool err_over = false;
  if (out_ && !drain(out_.get(), out_text_, kMaxOutput, over)) out_.reset();
  if (err_ && !drain(err_.get(), err_text_, kMaxStderrTail, err_over)) err_.reset();
  if (over) {
    stop();
    return DiscoveryResult{{},
                           "the host discovery script " + script_ + " printed more than " +
                               std::to_string(kMaxOutput >> 20) + " MiB; expected host lines"};
  }
  int status = 0;
  const pid_t done = out_ || err_ ? 0 : ::waitpid(pid_, &status, WNOHANG);
  if (done == pid_) {
    pid_ = -1;
    return finish(status);
  }
  if (done < 0 && errno == ECHILD) {
    // Reaped by someone else: no result from this run; the next start() runs it again.
    pid_ = -1;
    return std::nullopt;
  }
  if (Clock::now() >= deadline_) {
    stop();
    return DiscoveryResult{{},
                           "the host discovery script " + script_ + " did not finish within " +
                               seconds_text(timeout_) + " s (--elastic-timeout); it was killed"};
  }
  return std::nullopt;
}

DiscoveryResult Discovery::finish(int wait_status) {
  out_.reset();
  err_.reset();
  std::string tail;
  if (!err_text_.empty()) tail = "; its stderr: " + std::string(trim(err_text_));
  if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0)
    return DiscoveryResult{
        {}, "the host discovery script " + script_ + " " + describe_exit(wait_status) + tail};
  try {
    return DiscoveryResult{parse_discovery_output(out_text_, slots_per_host_, script_), {}};
  } catch (const UsageError& e) {
    return DiscoveryResult{{}, e.what() + tail};
  }
}

DiscoveryResult Discovery::run() {
  for (;;) {
    start();  // nothing while a run is going; again if one ended without a status
    if (auto r = poll()) return std::move(*r);
    pollfd fds[2] = {{out_.get(), POLLIN, 0}, {err_.get(), POLLIN, 0}};
    ::poll(fds, 2, 20);
  }
}

}  // namespace hvdrun::launcher
