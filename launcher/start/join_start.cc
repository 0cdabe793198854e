// Join mode (docs/kubernetes.md): the same hvdrun runs on every node. Node 0 listens on the
// endpoint's port and takes each other node's hvdrun as that host's agent (the join
// method's HostStarter); every other node connects to node 0, proves the job's secret and
// runs the agent on that connection (run_joined_node), then exits with the job's code.
//
// The port and the admission of a node (the hello, node 0's answer) are join_port.h's.
// Once every node has joined (in elastic join: MIN nodes and the last call), node 0 lays the
// ranks out node by node from their counts (join_layout.h) and leaves them in the start's
// table; the job, and with it every rank, starts only after that.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/deadline.h"
#include "common/env_names.h"
#include "common/error.h"
#include "common/exit_status.h"
#include "common/plural.h"
#include "common/quote.h"
#include "common/version.h"
#include "common/whole_number.h"
#include "launcher/agent/agent.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/hosts/connect_back.h"
#include "launcher/hosts/slurm_launch.h"
#include "launcher/plan/join_layout.h"
#include "launcher/plan/local_host.h"
#include "launcher/start/host_start.h"
#include "launcher/start/join_port.h"
#include "launcher/start/launch.h"

namespace hvdrun::launcher {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMaxAnswer = 4096;

// "node ranks 2, 3" / "node rank 2".
std::string node_ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "node rank " : "node ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Node 0's side: waits for the other nodes under --rdzv-timeout (elastic join: for MIN of
// them, then the last call for the others up to MAX).
class JoinStarter final : public HostStarter {
 public:
  void start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
             StartTable& table) override;

 private:
  // Enough nodes have joined: the ranks laid out from the nodes' counts into `table`.
  static void lay_out(const LaunchOptions& o, const JoinPort& port, StartTable& table);
  // Ends the links already taken with the launch's failure, so those nodes exit with it.
  static void fail_joined(StartTable& table, const std::string& message);
  // Too few nodes joined within --rdzv-timeout: names the missing ones.
  static void too_few(const LaunchOptions& o, const JoinPort& port, StartTable& table);
};

void JoinStarter::lay_out(const LaunchOptions& o, const JoinPort& port, StartTable& table) {
  std::vector<int> counts = {o.join.ranks_per_node};
  for (const auto& [rank, n] : port.ranks()) counts.push_back(n);  // by node rank, in order
  try {
    std::vector<JoinNode> layout = join_layout(counts);
    // In elastic join a node up to MAX may be missing: each node keeps its node rank's name.
    auto node = port.ranks().begin();
    for (std::size_t i = 1; i < layout.size(); ++i, ++node)
      layout[i].name = "node" + std::to_string(node->first);
    const long long size = layout.back().first_rank + static_cast<long long>(layout.back().ranks);
    spdlog::info("node 0: {} joined; {} laid out node by node: {}",
                 o.join.elastic() ? counted(static_cast<long long>(layout.size()), "node")
                                  : std::string("every node"),
                 counted(size, "rank"), layout_text(layout));
    table.join_nodes = std::move(layout);
  } catch (const UsageError& e) {
    table.unreachable.emplace_back(e.what());
    fail_joined(table, std::string("hvdrun: node 0: ") + e.what() + "\n");
  }
}

void JoinStarter::fail_joined(StartTable& table, const std::string& message) {
  for (auto& [name, link] : table.links) {
    if (!link) continue;
    ByteQueue q;
    proto::encode(proto::JobEnd{exit_status::kLaunchFailed, message, false}, q);
    // A few bytes into a socket's empty send buffer: they go at once, or the node is gone.
    link->write(q.data(), q.size());
    link->close_write();
  }
  table.links.clear();
}

void JoinStarter::too_few(const LaunchOptions& o, const JoinPort& port, StartTable& table) {
  std::vector<int> missing;
  for (int r = 1; r < o.join.nnodes; ++r) {
    if (port.ranks().count(r) == 0) missing.push_back(r);
  }
  const std::string few =
      o.join.elastic()
          ? "only " + counted(static_cast<long long>(port.ranks().size()) + 1, "node") +
                " of the " + std::to_string(o.join.min_nodes) +
                " that --nnodes MIN:MAX needs at least joined; "
          : std::string();
  const std::string message =
      few + node_ranks_text(missing) + " did not join within " + std::to_string(o.join.timeout_s) +
      " s (--rdzv-timeout); start hvdrun with --node-rank " + std::to_string(missing.front()) +
      (missing.size() > 1 ? " (and the others)" : "") +
      " on its node with the same --nnodes, --rdzv-endpoint, --rdzv-id and secret, and check "
      "that it reaches this node at " +
      o.join.endpoint_host + ":" + std::to_string(o.join.endpoint_port);
  table.unreachable.push_back(message);
  fail_joined(table, "hvdrun: node 0: " + message + "\n");
}

void JoinStarter::start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
                        StartTable& table) {
  const LaunchOptions& o = context.options;
  table.join = true;
  const auto deadline = Clock::now() + std::chrono::seconds(o.join.timeout_s);
  std::shared_ptr<JoinPort> port;
  try {
    port = std::make_shared<JoinPort>(o);
  } catch (const LaunchError& e) {
    table.unreachable.emplace_back(e.what());
    return;
  }
  // Elastic join: MIN nodes (node 0 among them) are enough to start, after the last call.
  const std::size_t enough =
      o.join.elastic() ? static_cast<std::size_t>(o.join.min_nodes - 1) : hosts.size();
  spdlog::info("node 0: waiting for {} on {}:{} (--rdzv-timeout {} s)",
               counted(static_cast<long long>(enough), "node"), port->bind_address(),
               o.join.endpoint_port, o.join.timeout_s);
  while (port->ranks().size() < enough && Clock::now() < deadline) port->serve(deadline);
  if (port->ranks().size() >= enough && port->ranks().size() < hosts.size()) {
    // torchrun's last call: the nodes that come within it start with the others.
    spdlog::info(
        "node 0: {} of at most {} joined; waiting {} s more for the others "
        "(HVDRUN_JOIN_LAST_CALL)",
        counted(static_cast<long long>(port->ranks().size()) + 1, "node"), o.join.nnodes,
        o.join.last_call_s);
    const auto last_call = Clock::now() + std::chrono::seconds(o.join.last_call_s);
    while (port->ranks().size() < hosts.size() && Clock::now() < last_call) port->serve(last_call);
  }
  table.links = port->take_links();
  if (port->ranks().size() < enough) return too_few(o, *port, table);
  lay_out(o, *port, table);
  // Elastic join: the port stays open while the job runs, for the nodes that come later.
  if (o.join.elastic() && table.ok()) table.join_port = std::move(port);
}

// The joining node's connection attempts: one address of the endpoint after another,
// afresh on each round (the name may resolve late, node 0 may start late), with a backoff
// that doubles from 25 ms up to 2 s, jittered: nodes started together with node 0 (one
// orchestrator's pods) join within a few tens of milliseconds.
class Joiner {
 public:
  explicit Joiner(const LaunchOptions& o) : o_(o) {}
  int run();

 private:
  UniqueFd try_once(bool& refused, std::string& answer);
  std::string where() const {
    return o_.join.endpoint_host + ":" + std::to_string(o_.join.endpoint_port);
  }
  int finish(int code, const std::string& message) const {
    std::fprintf(stderr, "hvdrun: node rank %d: %s\n", o_.join.node_rank, message.c_str());
    std::fflush(stderr);
    return code;
  }

  const LaunchOptions& o_;
  std::string last_error_ = "nothing tried";
};

UniqueFd Joiner::try_once(bool& refused, std::string& answer) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(o_.join.endpoint_port);
  if (const int rc = ::getaddrinfo(o_.join.endpoint_host.c_str(), port.c_str(), &hints, &found)) {
    last_error_ =
        std::string("cannot resolve ") + quote(o_.join.endpoint_host) + ": " + ::gai_strerror(rc);
    return {};
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string text = "node rank " + std::to_string(o_.join.node_rank) + "\n" +
                           o_.join.run_id + "\n" + kVersionLine + "\n" + host + "\nranks " +
                           std::to_string(o_.join.ranks_per_node) + "\n" +
                           o_.join.ranks_per_node_from;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    // Bounds the connect and node 0's answer below (the agent then polls the socket).
    timeval tv{5, 0};
    ::setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_error_ = std::string("connect: ") + std::strerror(errno);
      continue;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    last_error_ = prove_to_listener(s.get(), text, o_.join.secret, deadline, refused);
    if (refused) return {};
    if (!last_error_.empty()) continue;
    char len[4];
    std::uint32_t n = 0;
    if (::recv(s.get(), len, 4, MSG_WAITALL) == 4) {
      n = (std::uint32_t{static_cast<unsigned char>(len[0])} << 24) |
          (std::uint32_t{static_cast<unsigned char>(len[1])} << 16) |
          (std::uint32_t{static_cast<unsigned char>(len[2])} << 8) |
          std::uint32_t{static_cast<unsigned char>(len[3])};
      answer.assign(std::min(n, kMaxAnswer), '\0');
      if (n == 0 || ::recv(s.get(), answer.data(), answer.size(), MSG_WAITALL) ==
                        static_cast<ssize_t>(answer.size()))
        return s;
    }
    last_error_ = "node 0 closed the connection before it answered";
  }
  return {};
}

int Joiner::run() {
  const auto deadline = Clock::now() + std::chrono::seconds(o_.join.timeout_s);
  std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
  auto backoff = std::chrono::milliseconds(25);
  for (int attempt = 1;; ++attempt) {
    bool refused = false;
    std::string answer;
    UniqueFd sock = try_once(refused, answer);
    if (refused)
      return finish(exit_status::kLaunchFailed,
                    "node 0 at " + where() +
                        " refused this node: it holds another secret; give every node the same "
                        "--secret-file or HVDRUN_JOB_SECRET");
    if (sock && answer.rfind(kJoinLater, 0) == 0) {
      // Elastic join: node 0 still holds this node rank's last hvdrun (a pod recreated
      // before node 0 saw the old one go): try again until it has.
      last_error_ = "node 0 says: " + answer.substr(std::string_view(kJoinLater).size());
      sock.reset();
    }
    if (sock && !answer.empty())
      return finish(exit_status::kLaunchFailed,
                    "node 0 at " + where() + " refused this node: " + answer);
    if (sock) {
      spdlog::info("node rank {}: joined node 0 at {}", o_.join.node_rank, where());
      JobVerdict verdict;
      const int agent_code = run_agent(sock.get(), sock.get(), &verdict);
      if (!verdict.known)
        return finish(agent_code != 0 ? agent_code : exit_status::kLaunchFailed,
                      "node 0 closed the connection without the job's result (it failed or was "
                      "stopped; its output says why)");
      if (!verdict.message.empty()) std::fputs(verdict.message.c_str(), stderr);
      if (verdict.this_host) return finish(verdict.exit_code, "the failure above is this node's");
      return verdict.exit_code;
    }
    if (Clock::now() >= deadline)
      return finish(exit_status::kLaunchFailed,
                    "could not join node 0 at " + where() + " within " +
                        std::to_string(o_.join.timeout_s) + " s (--rdzv-timeout): " + last_error_ +
                        "; check that node 0 runs hvdrun with --node-rank 0 and the same "
                        "--rdzv-endpoint, and that this node reaches it");
    const auto wait = backoff + std::chrono::milliseconds(jitter() % (backoff.count() / 2 + 1));
    spdlog::info("node rank {}: node 0 at {} not reached ({}); retrying (attempt {}) after {} ms",
                 o_.join.node_rank, where(), last_error_, attempt + 1, wait.count());
    std::this_thread::sleep_for(std::min<Clock::duration>(wait, left_until(deadline)));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace

std::unique_ptr<HostStarter> make_join_starter() { return std::make_unique<JoinStarter>(); }

int run_joined_node(const LaunchOptions& options) { return Joiner(options).run(); }

}  // namespace hvdrun::launcher
