// The Slurm launch method's connect-back without Slurm: `srun` is a stand-in script that
// starts the command once per node with SLURMD_NODENAME set, as srun's tasks get it. The
// real agents (the built hvdrun) connect back and authenticate; a peer with the wrong
// secret, or one that reports a node not in the step, is turned away and its node named.
// Issue #27: a listener that is not the launcher (on an address the agent tries first, or
// on the launcher's port in the agent's own network namespace) gets no more than a proof
// and has nothing run.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "common/fd.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/hosts/slurm_launch.h"
#include "tests/skip.h"
#include "tests/support/processes.h"

using namespace hvdrun::launcher;
using namespace std::chrono_literals;

namespace {

// A stand-in srun: `srun --nodes N ... --nodelist a,b,c ... CMD...` runs CMD once per node
// listed, with SLURMD_NODENAME (or the name BODY gives it), and waits for them all.
std::string fake_srun(const hvdrun::testing::TempDir& dir, const std::string& per_node) {
  std::string path = dir.path() + "/srun";
  std::ofstream(path)
      << "#!/bin/bash\n"
         "nodes=\n"
         "while [[ $1 == --* ]]; do [[ $1 == --nodelist ]] && nodes=$2; shift 2; done\n"
         "IFS=, read -ra list <<< \"$nodes\"\n"
         "i=0\n"
         "for node in \"${list[@]}\"; do\n"
      << per_node
      << "  i=$((i + 1))\n"
         "done\n"
         "wait\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

// One case's stand-in step: a temporary directory `d` for the stand-in srun (written by
// per_node()) and what the case shares with it, and the spec that starts the built hvdrun's
// agents through that srun on `nodes`, bound to 127.0.0.1, within `timeout`.
struct StandInStep {
  explicit StandInStep(std::vector<std::string> nodes, std::chrono::seconds timeout = 5s) {
    spec.nodes = std::move(nodes);
    spec.remote_hvdrun = hvdrun::testing::hvdrun_binary();
    spec.srun = d + "/srun";
    spec.bind_address = "127.0.0.1";
    spec.deadline = std::chrono::steady_clock::now() + timeout;
  }

  // Writes the stand-in srun with `body` run per node (see fake_srun).
  void per_node(const std::string& body) { fake_srun(dir, body); }

  hvdrun::testing::TempDir dir{"srun"};
  const std::string& d = dir.path();
  SlurmStepSpec spec;
};

// A per-node srun body that writes the launcher's port to D/port, waits for D/ready (the
// test's listener, up on 127.0.0.2 and that port), and has the agent try 127.0.0.2:PORT
// before the launcher's own address.
std::string try_127_0_0_2_first(const std::string& d) {
  return "  port=${HVDRUN_AGENT_CONNECT##*:}; echo $port > " + d +
         "/port\n"
         "  for _ in $(seq 1000); do [[ -e " +
         d +
         "/ready ]] && break; sleep 0.01; done\n"
         "  HVDRUN_AGENT_CONNECT=127.0.0.2:$port,$HVDRUN_AGENT_CONNECT "
         "SLURMD_NODENAME=$node \"$@\" &\n";
}

std::string launch_error(const SlurmStepSpec& spec) {
  try {
    start_slurm_agents(spec);
  } catch (const hvdrun::LaunchError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("slurm launch: every node's agent connects back and is linked to its node") {
  StandInStep step({"n1", "n2", "n3"});
  step.per_node("  SLURMD_NODENAME=$node SLURM_JOB_ID=9 SLURM_STEP_ID=0 \"$@\" &\n");
  auto links = start_slurm_agents(step.spec);
  REQUIRE(links.size() == 3);
  for (const auto& [node, link] : links) {
    CHECK(link->describe() == "agent on " + node + " (srun step 9.0)");
    CHECK(link->launcher_address() == "127.0.0.1");
  }
  // Closing a link ends its agent: the stand-in srun then exits by itself.
  for (auto& [node, link] : links) {
    CHECK(link->close(std::chrono::steady_clock::now() + 5s) == "closed its connection");
  }
}

TEST_CASE("slurm launch: a peer without the secret is turned away and its node named") {
  StandInStep step({"n1", "n2"}, 2s);
  // n2's "agent" holds another secret.
  step.per_node(
      "  if [[ $node == n2 ]]; then HVDRUN_AGENT_SECRET=00ff SLURMD_NODENAME=$node \"$@\" &\n"
      "  else SLURMD_NODENAME=$node \"$@\" & fi\n");
  const std::string err = launch_error(step.spec);
  CHECK(err.rfind("--launcher slurm: no agent from n2 (", 0) == 0);
}

TEST_CASE("slurm launch: an agent reporting a node outside the step is turned away") {
  StandInStep step({"n1"}, 2s);
  step.per_node("  SLURMD_NODENAME=other$i \"$@\" &\n");
  CHECK(launch_error(step.spec).rfind("--launcher slurm: no agent from n1 (", 0) == 0);
}

TEST_CASE("slurm launch: srun that fails is reported with its exit") {
  StandInStep step({"n1", "n2"});
  std::ofstream(step.spec.srun)
      << "#!/bin/sh\necho 'srun: error: Unable to create step' >&2\nexit 1\n";
  ::chmod(step.spec.srun.c_str(), 0755);
  CHECK(launch_error(step.spec).rfind(
            "--launcher slurm: no agent from n1, n2 (srun exited with code 1;", 0) == 0);
  step.spec.nodes = {"n1"};
  step.spec.srun = step.d + "/missing-srun";
  CHECK(launch_error(step.spec) ==
        "--launcher slurm: cannot run " + step.d +
            "/missing-srun: No such file or directory; check that Slurm's srun is on PATH");
}

namespace {

using Clock = std::chrono::steady_clock;

// Waits for `path` to hold a complete line; its text, or empty at the deadline.
std::string wait_line(const std::string& path, Clock::time_point deadline) {
  for (;;) {
    const std::string text = hvdrun::testing::read_file(path);
    if (!text.empty() && text.back() == '\n') return text.substr(0, text.size() - 1);
    if (Clock::now() >= deadline) return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Reads what arrives on `fd` until it closes, `deadline`, or `quiet` passes without a byte.
std::string read_until_quiet(int fd, Clock::time_point deadline, std::chrono::milliseconds quiet) {
  std::string got;
  for (;;) {
    const std::chrono::milliseconds left(hvdrun::ms_left(deadline));
    if (left.count() == 0) return got;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min(left, quiet).count())) <= 0) return got;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

// A listener that is not the launcher. Once the stand-in srun has written the launcher's
// port to DIR/port (and, with `in_netns`, the pid of a process in the agent's network
// namespace to DIR/ns), it listens on ADDRESS:PORT there, says so in DIR/ready and greets
// a connection as the launcher does (a 32-byte nonce). Whatever comes back, it answers with
// an agent-protocol hello and a spawn of `touch DIR/hijacked`: an agent that acted on
// frames from it would run that.
class Hijacker {
 public:
  Hijacker(std::string dir, std::string address, bool in_netns)
      : dir_(std::move(dir)), address_(std::move(address)), in_netns_(in_netns) {
    thread_ = std::thread([this] { run(); });
  }
  ~Hijacker() {
    if (thread_.joinable()) thread_.join();
  }
  Hijacker(const Hijacker&) = delete;
  Hijacker& operator=(const Hijacker&) = delete;

  // Ends the wait for a connection (after the launcher is done), then returns.
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  std::string error;      // why the hijacker could not listen (empty: it listened)
  int connections = 0;    // connections accepted
  std::string hello;      // what the agent sent before the hijacker's frames
  std::string afterward;  // what it sent after them

 private:
  void run() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    const std::string port = wait_line(dir_ + "/port", deadline);
    if (port.empty()) return void(error = "the stand-in srun wrote no port");
    if (in_netns_) {
      const std::string pid = wait_line(dir_ + "/ns", deadline);
      hvdrun::UniqueFd ns(::open(("/proc/" + pid + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
      // This thread alone moves into the agent's network namespace.
      if (!ns || ::setns(ns.get(), CLONE_NEWNET) != 0)
        return void(error = std::string("setns: ") + std::strerror(errno));
    }
    hvdrun::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
    ::inet_pton(AF_INET, address_.c_str(), &a.sin_addr);
    int one = 1;
    ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener.get(), 8) != 0)
      return void(error =
                      "cannot listen on " + address_ + ":" + port + ": " + std::strerror(errno));
    std::ofstream(dir_ + "/ready") << "1\n";
    while (!stop_) {
      pollfd p{listener.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      hvdrun::UniqueFd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) continue;
      ++connections;
      const std::string nonce(32, 'n');
      ::send(conn.get(), nonce.data(), nonce.size(), MSG_NOSIGNAL);
      const auto until = Clock::now() + std::chrono::seconds(5);
      hello += read_until_quiet(conn.get(), until, std::chrono::milliseconds(300));
      namespace proto = hvdrun::launcher::proto;
      hvdrun::launcher::ByteQueue frames;
      proto::encode(proto::Hello{}, frames);
      proto::Spawn spawn;
      spawn.argv = {"touch", dir_ + "/hijacked"};
      spawn.cwd = "/";
      spawn.env = {"PATH=/usr/bin:/bin"};
      proto::encode(spawn, frames);
      ::send(conn.get(), frames.data(), frames.size(), MSG_NOSIGNAL);
      afterward += read_until_quiet(conn.get(), until, std::chrono::milliseconds(1000));
    }
  }

  std::string dir_;
  std::string address_;
  bool in_netns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE(
    "slurm launch: a listener without the secret on an address tried first gets a proof "
    "and runs nothing, and the agent goes on to the launcher") {
  StandInStep step({"n1"}, 15s);
  const std::string& d = step.d;
  // The agent is told to try 127.0.0.2:PORT first, where the hijacker listens.
  step.per_node(try_127_0_0_2_first(d));
  Hijacker hijacker(d, "127.0.0.2", false);
  auto links = start_slurm_agents(step.spec);
  hijacker.finish();
  REQUIRE(hijacker.error.empty());
  CHECK(links.size() == 1);  // the agent went on to the real launcher
  CHECK(hijacker.connections == 1);
  // It got the agent's hello (a node name, a nonce, a MAC) and then the connection closed:
  // no agent-protocol frame, nothing run.
  CHECK(hijacker.hello.size() < 200);
  CHECK(hijacker.afterward.empty());
  CHECK_FALSE(std::filesystem::exists(d + "/hijacked"));
  for (auto& [node, link] : links) link->close(Clock::now() + 5s);
}

TEST_CASE(
    "slurm launch: in another network namespace the agent does not use loopback, so a "
    "listener on the launcher's port there gets nothing") {
  StandInStep step({"n1"}, 15s);
  const std::string& d = step.d;
  // The agent runs in a network namespace of its own (another node, as far as its sockets
  // go), where the hijacker listens on 127.0.0.1 and the launcher's port.
  step.per_node("  port=${HVDRUN_AGENT_CONNECT##*:}; echo $port > " + d +
                "/port\n"
                "  SLURMD_NODENAME=$node unshare --net sh -c 'ip link set lo up; echo $$ > " +
                d + "/ns; for _ in $(seq 1000); do [ -e " + d +
                "/ready ] && break; sleep 0.01; done; exec \"$@\"' sh \"$@\" &\n");
  if (hvdrun::testing::CapturedProcess({"unshare", "--net", "true"}).wait(10s) != 0)
    HVDRUN_SKIP("cannot make a network namespace here (unshare --net)");
  Hijacker hijacker(d, "127.0.0.1", true);
  const std::string err = launch_error(step.spec);
  hijacker.finish();
  REQUIRE(hijacker.error.empty());
  CHECK(err.rfind("--launcher slurm: no agent from n1 (srun exited", 0) == 0);
  CHECK(hijacker.connections == 0);
  CHECK(hijacker.hello.empty());
  CHECK_FALSE(std::filesystem::exists(d + "/hijacked"));
}

namespace {

// Passes bytes both ways between one connection on 127.0.0.2:PORT and the launcher at
// 127.0.0.1:PORT (PORT from DIR/port), counting what the launcher sent through it.
class Relay {
 public:
  explicit Relay(std::string dir) : dir_(std::move(dir)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  std::string error;
  std::size_t from_agent = 0;     // bytes passed along to the launcher
  std::size_t from_launcher = 0;  // bytes passed along to the agent

 private:
  void run() {
    const std::string port = wait_line(dir_ + "/port", Clock::now() + std::chrono::seconds(10));
    if (port.empty()) return void(error = "no port");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(std::stoi(port)));
    ::inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
    hvdrun::UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener.get(), 8) != 0)
      return void(error = std::string("listen: ") + std::strerror(errno));
    std::ofstream(dir_ + "/ready") << "1\n";
    hvdrun::UniqueFd agent;
    while (!stop_ && !agent) {
      pollfd p{listener.get(), POLLIN, 0};
      if (::poll(&p, 1, 20) > 0) agent.reset(::accept4(listener.get(), nullptr, nullptr, 0));
    }
    if (!agent) return;
    hvdrun::UniqueFd launcher(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (::connect(launcher.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      return void(error = std::string("connect: ") + std::strerror(errno));
    pollfd fds[2] = {{agent.get(), POLLIN, 0}, {launcher.get(), POLLIN, 0}};
    while (!stop_) {
      if (::poll(fds, 2, 20) <= 0) continue;
      char buf[4096];
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (n <= 0) return;  // either side closed: the relay ends both
        ::send(fds[1 - i].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
        (i == 0 ? from_agent : from_launcher) += static_cast<std::size_t>(n);
      }
    }
  }

  std::string dir_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE(
    "slurm launch: a relay that passes the handshake along is refused, and the agent "
    "goes on to the launcher itself") {
  StandInStep step({"n1"}, 15s);
  step.per_node(try_127_0_0_2_first(step.d));
  Relay relay(step.d);
  auto links = start_slurm_agents(step.spec);
  relay.finish();
  REQUIRE(relay.error.empty());
  CHECK(links.size() == 1);
  CHECK(relay.from_agent > 0);       // the agent's hello went through it
  CHECK(relay.from_launcher == 32);  // and of the launcher only its nonce: no proof, no frame
  for (auto& [node, link] : links) link->close(Clock::now() + 5s);
}
