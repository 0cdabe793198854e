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

#include "common/control_protocol.h"
#include "common/deadline.h"
#include "common/fd.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/plan/local_host.h"
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
      const long long left = hvdrun::ms_left(deadline);
      REQUIRE(left > 0);
      pollfd p{from_.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left));
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

TEST_CASE("agent: a rank's control channel carries its declarations out and its place in") {
  AgentProcess a;
  a.expect<proto::AgentHello>();
  proto::Regenerate g;
  g.generation = 3;
  g.reason = "generation 2 ended: host node2 was lost";
  g.failure = true;
  g.hosts_removed = true;
  g.size = 2;
  g.rendezvous_addr = "127.0.0.1";
  g.rendezvous_port = 40000;
  g.secret = std::string(64, 'c');
  g.ranks = {{5, 1, 0, 1, 1, 2}};  // rank 5 becomes rank 1; rank 6 is not placed
  control::Placement p;
  p.generation = 3;
  p.rank = 1;
  p.size = 2;
  p.local_rank = 0;
  p.local_size = 1;
  p.cross_rank = 1;
  p.cross_size = 2;
  p.rendezvous_addr = g.rendezvous_addr;
  p.rendezvous_port = g.rendezvous_port;
  p.secret = g.secret;
  p.hosts_removed = true;
  p.failure = true;
  const std::string want =
      control::encode(control::EndGeneration{2, g.reason}) + control::encode(p);
  std::string want_hex;
  for (unsigned char c : want) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    want_hex += b;
  }
  // Rank 5 declares itself elastic in generation 2, says it left it, then prints what the
  // agent sends it, in hex. Rank 6 has a channel too but no place in generation 3.
  auto s5 = shell(5,
                  "printf '\\000\\000\\000\\005\\001\\000\\000\\000\\002' >&$HVDRUN_CONTROL_FD && "
                  "printf '\\000\\000\\000\\005\\002\\000\\000\\000\\002' >&$HVDRUN_CONTROL_FD && "
                  "head -c " +
                      std::to_string(want.size()) +
                      " <&$HVDRUN_CONTROL_FD | od -An -v -tx1 | tr -d ' \\n'");
  s5.argv[0] = "bash";  // dash takes only one-digit descriptors after >&
  s5.control = true;
  auto s6 = shell(6, "test -n \"$HVDRUN_CONTROL_FD\" && exec sleep 30");
  s6.control = true;
  a.send(s5);
  a.send(s6);
  int started = 0;
  bool elastic = false;
  bool left = false;
  bool sent = false;
  std::string out5;
  std::optional<proto::RankExited> exit5, exit6;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!(exit5 && exit6)) {
    REQUIRE(Clock::now() < deadline);
    INFO("started " << started << ", elastic " << elastic << ", left " << left << ", sent " << sent
                    << ", rank 5 printed '" << out5 << "'");
    auto got = a.next();
    REQUIRE(got);
    if (std::holds_alternative<proto::RankStarted>(got->msg)) ++started;
    if (auto* e = std::get_if<proto::RankElastic>(&got->msg)) {
      CHECK(*e == proto::RankElastic{5, 2});
      elastic = true;
    }
    if (auto* l = std::get_if<proto::RankLeft>(&got->msg)) {
      CHECK(*l == proto::RankLeft{5, 2});
      left = true;
    }
    if (auto* o = std::get_if<proto::Output>(&got->msg); o && o->rank == 5) out5 += got->data;
    if (auto* x = std::get_if<proto::RankExited>(&got->msg)) (x->rank == 5 ? exit5 : exit6) = *x;
    if (elastic && left && started == 2 && !sent) {
      a.send(g);
      sent = true;
    }
  }
  CHECK(sent);
  CHECK(out5 == want_hex);
  CHECK(exit5->value == 0);
  CHECK_FALSE(exit5->signaled);
  CHECK(exit6->signaled);  // stopped: no place in the next generation
  CHECK(exit6->value == SIGTERM);
}
