// The agent driven over real pipes, as the launcher drives it: spawn, output, exit
// reports, kill requests, EOF on its input, spawn failures. Every wait has a deadline.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "common/fd.h"
#include "launcher/agent.h"
#include "launcher/agent_protocol.h"
#include "launcher/local_host.h"
#include "tests/support/processes.h"

using namespace hvdrun;
using namespace hvdrun::launcher;
using hvdrun::testing::wait_none_alive;
using Clock = std::chrono::steady_clock;

namespace {

// A message with its output bytes copied out of the decoder.
struct Got {
  proto::Message msg;
  std::string data;
};

class AgentProcess {
 public:
  explicit AgentProcess(const std::string& launcher_addr = {}) {
    auto [in_r, in_w] = make_pipe();
    auto [out_r, out_w] = make_pipe();
    // A child inherits unflushed stdio buffers (Catch's "Filters:" line), and a rank that
    // fails to exec would write them as its output where _exit flushes (under TSan).
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      in_w.reset();
      out_r.reset();
      ::_exit(run_agent(in_r.get(), out_w.get()));
    }
    to_ = std::move(in_w);
    from_ = std::move(out_r);
    proto::Hello h;
    h.kill_grace_ms = 300;
    h.launcher_addr = launcher_addr;
    send(h);
  }
  ~AgentProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  void send(const proto::Message& m) {
    ByteQueue q;
    proto::encode(m, q);
    REQUIRE(write_all(to_.get(), q.data(), q.size()));
  }
  void close_input() { to_.reset(); }

  // The next message other than a heartbeat, or nullopt at EOF; fails at the deadline.
  std::optional<Got> next(std::chrono::milliseconds within = std::chrono::milliseconds(5000)) {
    auto deadline = Clock::now() + within;
    for (;;) {
      if (auto m = decoder_.next()) {
        if (std::holds_alternative<proto::Heartbeat>(*m)) continue;
        Got g{*m, {}};
        if (auto* o = std::get_if<proto::Output>(&g.msg)) {
          g.data = std::string(o->data);
          o->data = {};
        }
        return g;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      REQUIRE(left.count() > 0);
      pollfd p{from_.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
      char* buf = decoder_.prepare(65536);
      ssize_t n = ::read(from_.get(), buf, 65536);
      if (n == 0) return std::nullopt;
      if (n > 0) decoder_.commit(static_cast<std::size_t>(n));
    }
  }
  template <class T>
  T expect() {
    auto g = next();
    REQUIRE(g);
    INFO("got " << proto::type_name(g->msg) << (g->data.empty() ? "" : ": " + g->data));
    REQUIRE(std::holds_alternative<T>(g->msg));
    return std::get<T>(g->msg);
  }
  // Waits for the agent to exit; returns its exit code.
  int wait_exit() {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      REQUIRE(Clock::now() < deadline);
      ::usleep(2000);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  UniqueFd to_;
  UniqueFd from_;
  proto::Decoder decoder_;
};

proto::Spawn shell(int rank, const std::string& script) {
  proto::Spawn s;
  s.rank = rank;
  s.argv = {"sh", "-c", script};
  s.cwd = "/";
  s.env = {"PATH=/usr/bin:/bin", "GREETING=hi there"};
  return s;
}

}  // namespace

TEST_CASE("agent: its hello names this host's interface toward the launcher's address") {
  {
    AgentProcess a;  // no address: nothing looked up
    CHECK(a.expect<proto::AgentHello>().iface.empty());
  }
  {
    AgentProcess a("127.0.0.1");
    CHECK(a.expect<proto::AgentHello>().iface == "lo");
  }
  // An address of another interface, when this machine has one: the agent names that one.
  for (const std::string& addr : launcher::local_addresses()) {
    if (addr.find(':') != std::string::npos || addr.rfind("127.", 0) == 0) continue;
    AgentProcess a(addr);
    std::string iface = a.expect<proto::AgentHello>().iface;
    INFO(addr);
    CHECK(iface == launcher::interface_for_address(addr));
    CHECK(iface != "lo");
    break;
  }
}

TEST_CASE("agent: a rank runs with its environment and its output precedes its exit report") {
  AgentProcess a;
  auto hello = a.expect<proto::AgentHello>();
  CHECK(hello.version == proto::kVersion);
  CHECK(hello.pid > 0);
  a.send(shell(3, "echo \"$GREETING from $(pwd)\"; echo bad >&2; printf tail >&2; exit 4"));
  CHECK(a.expect<proto::RankStarted>().rank == 3);
  std::string out, err;
  for (;;) {
    auto g = a.next();
    REQUIRE(g);
    if (auto* o = std::get_if<proto::Output>(&g->msg)) {
      CHECK(o->rank == 3);
      (o->stream == proto::Stream::out ? out : err) += g->data;
      continue;
    }
    auto ex = std::get<proto::RankExited>(g->msg);
    CHECK(ex.rank == 3);
    CHECK_FALSE(ex.signaled);
    CHECK(ex.value == 4);
    CHECK(ex.stderr_tail == std::vector<std::string>{"bad", "tail"});
    break;
  }
  CHECK(out == "hi there from /\n");
  CHECK(err == "bad\ntail");
  a.close_input();
  CHECK_FALSE(a.next());
  CHECK(a.wait_exit() == 0);
}

TEST_CASE("agent: a kill request ends ranks with SIGTERM then SIGKILL after the grace") {
  AgentProcess a;
  a.expect<proto::AgentHello>();
  a.send(shell(0, "exec sleep 30"));
  a.send(shell(1, "trap '' TERM; echo ready; while :; do sleep 1; done"));
  int pid0 = 0;
  for (int started = 0, ready = 0; started < 2 || !ready;) {
    auto g = a.next();
    REQUIRE(g);
    if (auto* s = std::get_if<proto::RankStarted>(&g->msg)) {
      ++started;
      if (s->rank == 0) pid0 = s->pid;
    }
    if (std::holds_alternative<proto::Output>(g->msg)) ready = 1;
  }
  auto t0 = Clock::now();
  a.send(proto::Kill{300});
  std::map<int, proto::RankExited> exits;
  while (exits.size() < 2) {
    auto g = a.next();
    REQUIRE(g);
    if (auto* ex = std::get_if<proto::RankExited>(&g->msg)) exits[ex->rank] = *ex;
  }
  CHECK(exits[0].signaled);
  CHECK(exits[0].value == SIGTERM);
  CHECK(exits[1].signaled);
  CHECK(exits[1].value == SIGKILL);
  CHECK(Clock::now() - t0 >= std::chrono::milliseconds(250));
  CHECK(wait_none_alive({pid0}, std::chrono::milliseconds(100)));
  a.close_input();
  CHECK(a.wait_exit() == 0);
}

TEST_CASE("agent: EOF on its input kills every rank and the agent exits") {
  AgentProcess a;
  a.expect<proto::AgentHello>();
  a.send(shell(0, "exec sleep 30"));
  auto started = a.expect<proto::RankStarted>();
  a.close_input();
  CHECK(a.wait_exit() == 0);
  CHECK(wait_none_alive({started.pid}, std::chrono::milliseconds(2000)));
}

TEST_CASE("agent: a rank that cannot start is reported with the reason") {
  AgentProcess a;
  a.expect<proto::AgentHello>();
  proto::Spawn s = shell(2, "true");
  s.cwd = "/no/such/dir";
  a.send(s);
  auto f = a.expect<proto::Fatal>();
  CHECK(f.rank == 2);
  CHECK_THAT(f.message, Catch::Contains("cannot change to directory '/no/such/dir'") &&
                            Catch::Contains("which must exist on every host"));
  proto::Spawn t = shell(4, "true");
  t.argv = {"no-such-program-anywhere"};
  a.send(t);
  f = a.expect<proto::Fatal>();
  CHECK(f.rank == 4);
  CHECK_THAT(f.message, Catch::Contains("cannot execute 'no-such-program-anywhere'"));
  a.close_input();
  CHECK(a.wait_exit() == 0);
}

TEST_CASE("agent: an invalid frame from the launcher is fatal and no rank survives it") {
  AgentProcess a;
  a.expect<proto::AgentHello>();
  a.send(shell(0, "exec sleep 30"));
  auto started = a.expect<proto::RankStarted>();
  // A frame that decodes but is invalid: a spawn for a negative rank.
  proto::Spawn bad = shell(-1, "true");
  a.send(bad);
  auto fatal = a.expect<proto::Fatal>();
  CHECK_THAT(fatal.message, Catch::Contains("negative rank"));
  CHECK(a.wait_exit() == 1);
  CHECK(wait_none_alive({started.pid}, std::chrono::milliseconds(2000)));
}
