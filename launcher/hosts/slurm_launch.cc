// The Slurm launch method: the srun step, its agents' links, and the agent's entry (the
// connect-back port and handshake are launcher/connect_back.*).
#include "launcher/hosts/slurm_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/deadline.h"
#include "common/error.h"
#include "common/fd.h"
#include "launcher/agent/agent.h"
#include "launcher/hosts/connect_back.h"
#include "launcher/plan/local_host.h"
#include "launcher/process/subprocess.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"

extern char** environ;

namespace hvdrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
namespace rv = rendezvous;

// How often the wait for agents looks whether srun has ended.
constexpr std::chrono::milliseconds kSrunCheck{50};

std::string ip_of(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return buf;
}

std::string sock_ip(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return rc == 0 ? ip_of(a) : std::string();
}

// This machine's IPv4 addresses, loopback last: where agents on other nodes may reach it.
std::vector<std::string> own_addresses() {
  std::vector<std::string> out;
  for (const std::string& ip : local_addresses()) {
    in_addr v4{};
    if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1 && ip.rfind("127.", 0) != 0) out.push_back(ip);
  }
  out.emplace_back("127.0.0.1");
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// The srun process of a step: shared by the step's links; the last one to go waits for
// srun, and cancels the step when it does not end by itself.
class SrunStep {
 public:
  explicit SrunStep(pid_t pid) : pid_(pid) {}
  ~SrunStep() { finish(Clock::now() + std::chrono::seconds(10)); }
  SrunStep(const SrunStep&) = delete;
  SrunStep& operator=(const SrunStep&) = delete;

  void set_step(std::string step) {
    if (step_.empty()) step_ = std::move(step);
  }
  const std::string& step() const { return step_; }

  // Waits until `deadline` for srun; then cancels the step, and kills srun at last.
  void finish(Clock::time_point deadline) {
    if (pid_ <= 0) return;
    if (reaped_by(deadline)) return;
    if (!step_.empty()) {
      spdlog::warn("srun step {} did not end; cancelling it", step_);
      cancel();
    }
    if (!reaped_by(Clock::now() + std::chrono::seconds(5))) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }

  // True (and the status kept) once srun has exited; polls without blocking.
  bool exited() {
    if (pid_ <= 0) return true;
    if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }
  std::string how() const { return describe_exit(status_); }

 private:
  bool reaped_by(Clock::time_point deadline) {
    for (auto delay = std::chrono::milliseconds(1);;
         delay = std::min(delay * 2, std::chrono::milliseconds(50))) {
      if (exited()) return true;
      if (Clock::now() >= deadline) return false;
      ::usleep(static_cast<useconds_t>(std::chrono::microseconds(delay).count()));
    }
  }

  void cancel() const {
    ChildSpec spec;
    spec.what = "scancel for step " + step_;
    spec.argv = {"scancel", "--quiet", step_};
    try {
      Child c = spawn(spec);
      wait_or_kill(c.pid, Clock::now() + std::chrono::seconds(5));
    } catch (const std::exception& e) {
      spdlog::warn("cannot cancel step {}: {}", step_, e.what());
    }
  }

  pid_t pid_;
  int status_ = 0;
  std::string step_;
};

class SlurmAgentLink : public AgentLink {
 public:
  SlurmAgentLink(std::string node, UniqueFd sock, std::shared_ptr<SrunStep> step,
                 std::string what = {})
      : node_(std::move(node)),
        sock_(std::move(sock)),
        step_(std::move(step)),
        what_(std::move(what)) {
    launcher_address_ = sock_ip(sock_.get(), false);
    host_address_ = sock_ip(sock_.get(), true);
    set_nonblocking(sock_.get());
  }
  ~SlurmAgentLink() override {
    if (sock_) close(Clock::now() + std::chrono::seconds(5));
  }
  SlurmAgentLink(const SlurmAgentLink&) = delete;
  SlurmAgentLink& operator=(const SlurmAgentLink&) = delete;

  void add_pollfds(std::vector<pollfd>& fds, bool want_read, bool want_write) const override {
    if (!sock_) return;
    short ev = static_cast<short>((want_read && !read_eof_ ? POLLIN : 0) |
                                  (want_write && !write_closed_ ? POLLOUT : 0));
    if (ev != 0) fds.push_back({sock_.get(), ev, 0});
  }

  IoResult read(char* buf, std::size_t size) override {
    if (!sock_ || read_eof_) return {IoResult::eof, 0, {}};
    for (;;) {
      ssize_t n = ::recv(sock_.get(), buf, size, 0);
      if (n > 0) return {IoResult::ok, static_cast<std::size_t>(n), {}};
      if (n == 0) {
        read_eof_ = true;
        return {IoResult::eof, 0, {}};
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return {IoResult::would_block, 0, {}};
      return {IoResult::error, 0,
              "connection to the agent on " + node_ + ": " + std::strerror(errno)};
    }
  }

  IoResult write(const char* buf, std::size_t size) override {
    if (!sock_ || write_closed_)
      return {IoResult::error, 0, "write to agent: stream already closed"};
    for (;;) {
      ssize_t n = ::send(sock_.get(), buf, size, MSG_NOSIGNAL);
      if (n >= 0)
        return {n ? IoResult::ok : IoResult::would_block, static_cast<std::size_t>(n), {}};
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return {IoResult::would_block, 0, {}};
      return {IoResult::error, 0,
              "connection to the agent on " + node_ + ": " + std::strerror(errno)};
    }
  }

  void close_write() override {
    if (sock_ && !write_closed_) ::shutdown(sock_.get(), SHUT_WR);
    write_closed_ = true;
  }

  void abort() override {
    // A reset: the agent sees its stream end and kills its ranks.
    if (!sock_) return;
    linger l{1, 0};
    ::setsockopt(sock_.get(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
    sock_.reset();
  }

  std::string close(Clock::time_point deadline) override {
    if (!sock_) return result_;
    close_write();
    // The agent closes its side once its ranks are gone.
    char buf[4096];
    result_ = "did not close its connection in time";
    while (Clock::now() < deadline) {
      pollfd p{sock_.get(), POLLIN, 0};
      if (::poll(&p, 1, std::max(poll_ms_left(deadline), 1)) <= 0) continue;
      ssize_t n = ::recv(sock_.get(), buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        result_ = "closed its connection";
        break;
      }
    }
    sock_.reset();
    step_.reset();
    return result_;
  }

  std::string describe() const override {
    if (!what_.empty()) return what_;
    return "agent on " + node_ + " (srun step " + (step_ ? step_->step() : "?") + ")";
  }
  std::string launcher_address() const override { return launcher_address_; }
  std::string host_address() const override { return host_address_; }

 private:
  std::string node_;
  UniqueFd sock_;
  std::shared_ptr<SrunStep> step_;
  std::string what_;
  bool read_eof_ = false;
  bool write_closed_ = false;
  std::string result_;
  std::string launcher_address_;
  std::string host_address_;
};

std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    bool replaced = false;
    for (const auto& x : extra)
      replaced = replaced || entry.substr(0, x.find('=') + 1) == x.substr(0, x.find('=') + 1);
    if (!replaced) env.emplace_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

std::unique_ptr<AgentLink> make_tcp_agent_link(const std::string& node, UniqueFd sock,
                                               const std::string& what) {
  int one = 1;
  ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::make_unique<SlurmAgentLink>(node, std::move(sock), nullptr, what);
}

std::vector<std::string> srun_command(const SlurmStepSpec& spec) {
  const std::string n = std::to_string(spec.nodes.size());
  return {spec.srun,
          "--nodes",
          n,
          "--ntasks",
          n,
          "--ntasks-per-node",
          "1",
          "--nodelist",
          join(spec.nodes, ","),
          "--job-name",
          "hvdrun-agents",
          spec.remote_hvdrun,
          "agent"};
}

std::map<std::string, std::unique_ptr<AgentLink>> start_slurm_agents(const SlurmStepSpec& spec) {
  const std::string secret = rv::generate_secret();
  ConnectBackPort listener(spec.bind_address, secret);
  const int port = listener.port();
  std::vector<std::string> targets;
  for (const auto& a : spec.bind_address == "0.0.0.0"
                           ? own_addresses()
                           : std::vector<std::string>{spec.bind_address}) {
    targets.push_back(a + ":" + std::to_string(port));
  }
  const std::vector<std::string> env =
      environment_with({std::string(kAgentConnectEnv) + "=" + join(targets, ","),
                        std::string(kAgentSecretEnv) + "=" + secret,
                        std::string(kAgentBootIdEnv) + "=" + machine_identity()});
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ChildSpec cs;
  cs.what = "srun";
  cs.argv = srun_command(spec);
  cs.env = &env;
  cs.stdin_fd = dev_null.get();
  cs.death_signal = SIGTERM;
  spdlog::debug("starting the agents: {}", join(cs.argv, " "));
  Child child = spawn(cs);
  auto step = std::make_shared<SrunStep>(child.pid);
  if (auto failure = read_exec_failure(child.exec_status.get())) {
    step->exited();
    throw LaunchError("--launcher slurm: cannot run " + spec.srun + ": " +
                      std::strerror(failure->error) + "; check that Slurm's srun is on PATH");
  }

  std::map<std::string, std::unique_ptr<AgentLink>> links;
  std::map<std::string, std::string> wanted;  // lower-case -> as planned
  for (const auto& n : spec.nodes) wanted.emplace(lower(n), n);
  bool srun_ended = false;
  // Handshakes run side by side (connect_back.h): idle or hostile connections to the
  // port delay no agent.
  while (links.size() < spec.nodes.size() && Clock::now() < spec.deadline && !srun_ended) {
    auto agents = listener.serve(std::min(spec.deadline, Clock::now() + kSrunCheck));
    srun_ended = step->exited();
    for (auto& a : agents) {
      auto it = wanted.find(lower(a.node));
      if (it == wanted.end() || links.count(it->second) != 0) {
        spdlog::warn("an agent reported node '{}', which is not one of {}; dropped", a.node,
                     join(spec.nodes, ","));
        continue;
      }
      step->set_step(a.step);
      int one = 1;
      ::setsockopt(a.sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      links[it->second] = std::make_unique<SlurmAgentLink>(it->second, std::move(a.sock), step);
    }
  }
  if (links.size() == spec.nodes.size()) return links;

  std::vector<std::string> missing;
  for (const auto& n : spec.nodes) {
    if (links.count(n) == 0) missing.push_back(n);
  }
  const std::string why =
      srun_ended ? "srun " + step->how() : "they did not connect within --start-timeout";
  links.clear();
  step->finish(Clock::now() + std::chrono::seconds(2));
  throw LaunchError("--launcher slurm: no agent from " + join(missing, ", ") + " (" + why +
                    "; srun's messages are above); check that " + spec.remote_hvdrun +
                    " runs on those nodes and that they can reach this machine over TCP "
                    "(--network-interface chooses the address), or use --launcher ssh");
}

int run_agent_main() {
  const char* targets = std::getenv(kAgentConnectEnv);
  if (targets == nullptr) return run_agent(0, 1);
  const std::string t(targets);
  const char* secret = std::getenv(kAgentSecretEnv);
  const char* boot = std::getenv(kAgentBootIdEnv);
  const std::string s(secret ? secret : "");
  const std::string b(boot ? boot : "");
  // The ranks this agent starts must not inherit the step's secret.
  ::unsetenv(kAgentConnectEnv);
  ::unsetenv(kAgentSecretEnv);
  ::unsetenv(kAgentBootIdEnv);
  if (s.empty())
    throw LaunchError(std::string(kAgentSecretEnv) + " is not set; the agent cannot authenticate");
  UniqueFd sock = connect_to_launcher(t, s, b);
  return run_agent(sock.get(), sock.get());
}

}  // namespace hvdrun::launcher
