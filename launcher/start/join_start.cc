// Join mode (docs/kubernetes.md): the same hvdrun runs on every node. Node 0 listens on the
// endpoint's port and takes each other node's hvdrun as that host's agent (the join
// method's HostStarter); every other node connects to node 0, proves the job's secret and
// runs the agent on that connection (run_joined_node), then exits with the job's code.
//
// After the secret's handshake (connect_back.h) node 0 answers once, before the agent
// protocol starts: u32 length | TEXT, empty when the node is taken, else why it is not
// (another --rdzv-id, another hvdrun version, a node rank out of range or taken).
// The joining node's hello TEXT is "node rank I\nRUN_ID\nVERSION\nHOSTNAME\nranks N\nFROM":
// N its --nproc-per-node count, FROM how a word (gpu, cpu, auto) was counted there, or empty
// for a number. Once every node has joined, node 0 lays the ranks out node by node from
// those counts (join_layout.h) and leaves them in the start's table; the job, and with it
// every rank, starts only after that.
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
#include "launcher/start/launch.h"

namespace hvdrun::launcher {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMaxAnswer = 4096;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const auto nl = text.find('\n', start);
    out.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) return out;
    start = nl + 1;
  }
}

bool send_answer(int fd, const std::string& text) {
  const auto len = static_cast<std::uint32_t>(text.size());
  std::string out = {static_cast<char>(len >> 24), static_cast<char>(len >> 16),
                     static_cast<char>(len >> 8), static_cast<char>(len)};
  out += text;
  std::string_view rest(out);
  while (!rest.empty()) {
    const ssize_t w = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    rest.remove_prefix(static_cast<std::size_t>(w));
  }
  return true;
}

// Where node 0 listens: --network-interface's address, else the endpoint's address when it
// is this machine's (a node name that resolves to this pod), else every interface (the
// endpoint may be a Service address that reaches this node through translation).
std::string join_bind_address(const LaunchOptions& o) {
  if (!o.network_interface.empty()) return interface_address(o.network_interface);
  in_addr v4{};
  if (::inet_pton(AF_INET, o.join.endpoint_host.c_str(), &v4) == 1) {
    const auto mine = local_addresses();
    if (std::find(mine.begin(), mine.end(), o.join.endpoint_host) != mine.end())
      return o.join.endpoint_host;
  }
  return "0.0.0.0";
}

// "node ranks 2, 3" / "node rank 2".
std::string node_ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "node rank " : "node ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// The count of ranks a hello's "ranks N" line names, or nothing when it names none.
std::optional<int> hello_ranks(const std::vector<std::string>& l) {
  constexpr std::string_view kRanks = "ranks ";
  if (l.size() < 5 || l[4].rfind(kRanks, 0) != 0) return std::nullopt;
  const auto n =
      parse_whole_number(std::string_view(l[4]).substr(kRanks.size()), 1, env_names::kMaxRanks);
  if (!n) return std::nullopt;
  return static_cast<int>(*n);
}

// Node 0's side: waits for every other node under --rdzv-timeout.
class JoinStarter final : public HostStarter {
 public:
  void start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
             StartTable& table) override;

 private:
  // Takes `agent` as its node's link, or answers why not.
  void admit(const LaunchOptions& o, const std::vector<const PlannedHost*>& hosts,
             ConnectedAgent& agent, StartTable& table);
  // Every node has joined: the ranks laid out from the nodes' counts into `table`.
  void lay_out(const LaunchOptions& o, StartTable& table) const;
  // Ends the links already taken with the launch's failure, so those nodes exit with it.
  static void fail_joined(StartTable& table, const std::string& message);

  std::map<int, std::string> joined_;  // node rank -> where it came from
  std::map<int, int> ranks_;           // node rank -> the ranks its hello said it runs
};

void JoinStarter::admit(const LaunchOptions& o, const std::vector<const PlannedHost*>& hosts,
                        ConnectedAgent& agent, StartTable& table) {
  const std::vector<std::string> l = lines_of(agent.text);
  const std::string claim = l.empty() ? std::string("?") : l[0];
  int rank = -1;
  if (claim.rfind("node rank ", 0) == 0) {
    try {
      rank = std::stoi(claim.substr(10));
    } catch (const std::exception&) {
      rank = -1;
    }
  }
  const std::optional<int> ranks = hello_ranks(l);
  std::string why;
  if (l.size() < 4) {
    why = "its hello is not a joining node's";
  } else if (l[1] != o.join.run_id) {
    why = "it belongs to --rdzv-id " + quote(l[1]) + ", this job is " + quote(o.join.run_id);
  } else if (l[2] != kVersionLine) {
    why = "it runs " + quote(l[2]) + ", node 0 runs " + quote(kVersionLine) +
          "; install the same hvdrun on every node";
  } else if (rank < 1 || rank >= o.join.nnodes) {
    why = "--nnodes " + std::to_string(o.join.nnodes) + " takes node ranks 1 to " +
          std::to_string(o.join.nnodes - 1) + " besides node 0";
  } else if (joined_.count(rank) != 0) {
    why = "node rank " + std::to_string(rank) + " already joined from " + joined_[rank];
  } else if (!ranks) {
    why = "its hello names no count of ranks; install the same hvdrun on every node";
  } else {
    why = count_refusal(o.join, *ranks, l.size() < 6 ? std::string() : l[5]);
  }
  if (!why.empty()) {
    spdlog::warn("join port {}: refused {} claiming to be {}: {}", o.join.endpoint_port, agent.peer,
                 quote(claim), why);
    send_answer(agent.sock.get(), why);
    return;
  }
  if (!send_answer(agent.sock.get(), "")) return;
  const PlannedHost& h = *hosts[static_cast<std::size_t>(rank - 1)];
  const std::string& host = l[3];
  joined_[rank] = agent.peer + " (" + host + ")";
  ranks_[rank] = *ranks;
  spdlog::info("node rank {} joined from {} ({})", rank, agent.peer, host);
  table.links[h.name] = make_tcp_agent_link(
      h.name, std::move(agent.sock),
      "node rank " + std::to_string(rank) + "'s hvdrun on " + host + " at " + agent.peer);
}

void JoinStarter::lay_out(const LaunchOptions& o, StartTable& table) const {
  std::vector<int> counts = {o.join.ranks_per_node};
  for (const auto& [rank, n] : ranks_) counts.push_back(n);  // by node rank, in order
  try {
    std::vector<JoinNode> layout = join_layout(counts);
    // In elastic join a node up to MAX may be missing: each node keeps its node rank's name.
    auto node = ranks_.begin();
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

void JoinStarter::start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
                        StartTable& table) {
  const LaunchOptions& o = context.options;
  table.join = true;
  const auto deadline = Clock::now() + std::chrono::seconds(o.join.timeout_s);
  std::optional<ConnectBackPort> port;
  const std::string bind = join_bind_address(o);
  try {
    port.emplace(bind, o.join.secret, PreauthPolicy{},
                 ConnectBackSettings{"join port", static_cast<std::uint16_t>(o.join.endpoint_port),
                                     false, "the job's secret"});
  } catch (const std::exception& e) {
    table.unreachable.push_back(std::string("node 0 cannot listen for the other nodes: ") +
                                e.what() +
                                "; is another job using that port? Choose another port in "
                                "--rdzv-endpoint HOST:PORT on every node");
    return;
  }
  // Elastic join: MIN nodes (node 0 among them) are enough to start, after the last call.
  const std::size_t enough =
      o.join.elastic() ? static_cast<std::size_t>(o.join.min_nodes - 1) : hosts.size();
  spdlog::info("node 0: waiting for {} on {}:{} (--rdzv-timeout {} s)",
               counted(static_cast<long long>(enough), "node"), bind, o.join.endpoint_port,
               o.join.timeout_s);
  while (table.links.size() < enough && Clock::now() < deadline) {
    for (ConnectedAgent& agent : port->serve(deadline)) admit(o, hosts, agent, table);
  }
  if (table.links.size() >= enough && table.links.size() < hosts.size()) {
    // torchrun's last call: the nodes that come within it start with the others.
    spdlog::info("node 0: {} of at most {} joined; waiting {} s more for the others "
                 "(HVDRUN_JOIN_LAST_CALL)",
                 counted(static_cast<long long>(table.links.size() + 1), "node"),
                 o.join.nnodes, o.join.last_call_s);
    const auto last_call = Clock::now() + std::chrono::seconds(o.join.last_call_s);
    while (table.links.size() < hosts.size() && Clock::now() < last_call) {
      for (ConnectedAgent& agent : port->serve(last_call)) admit(o, hosts, agent, table);
    }
  }
  if (table.links.size() >= enough) return lay_out(o, table);
  std::vector<int> missing;
  for (int r = 1; r < o.join.nnodes; ++r) {
    if (joined_.count(r) == 0) missing.push_back(r);
  }
  const std::string few =
      o.join.elastic() ? "only " + counted(static_cast<long long>(table.links.size() + 1), "node") +
                             " of the " + std::to_string(o.join.min_nodes) +
                             " that --nnodes MIN:MAX needs at least joined; "
                       : std::string();
  const std::string message =
      few + node_ranks_text(missing) + " did not join within " +
      std::to_string(o.join.timeout_s) + " s (--rdzv-timeout); start hvdrun with --node-rank " +
      std::to_string(missing.front()) + (missing.size() > 1 ? " (and the others)" : "") +
      " on its node with the same --nnodes, --rdzv-endpoint, --rdzv-id and secret, and check "
      "that it reaches this node at " +
      o.join.endpoint_host + ":" + std::to_string(o.join.endpoint_port);
  table.unreachable.push_back(message);
  fail_joined(table, "hvdrun: node 0: " + message + "\n");
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
    std::this_thread::sleep_for(std::min<Clock::duration>(wait, deadline - Clock::now()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace

std::unique_ptr<HostStarter> make_join_starter() { return std::make_unique<JoinStarter>(); }

int run_joined_node(const LaunchOptions& options) { return Joiner(options).run(); }

}  // namespace hvdrun::launcher
