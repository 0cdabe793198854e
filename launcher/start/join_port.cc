// Join mode's port on node 0 (join_port.h): the admission of a node from its hello, and the
// running job's hooks for elastic join.
#include "launcher/start/join_port.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/env_names.h"
#include "common/error.h"
#include "common/quote.h"
#include "common/version.h"
#include "common/whole_number.h"
#include "launcher/hosts/slurm_launch.h"
#include "launcher/plan/join_layout.h"
#include "launcher/plan/local_host.h"

namespace hvdrun::launcher {

namespace {

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

// The count of ranks a hello's "ranks N" line names, or nothing when it names none.
std::optional<int> hello_ranks(const std::vector<std::string>& l) {
  constexpr std::string_view kRanks = "ranks ";
  if (l.size() < 5 || l[4].rfind(kRanks, 0) != 0) return std::nullopt;
  const auto n =
      parse_whole_number(std::string_view(l[4]).substr(kRanks.size()), 1, env_names::kMaxRanks);
  if (!n) return std::nullopt;
  return static_cast<int>(*n);
}

// The node rank a hello's first line claims ("node rank 2"), or -1.
int claimed_rank(const std::string& claim) {
  constexpr std::string_view kNodeRank = "node rank ";
  if (claim.rfind(kNodeRank, 0) != 0) return -1;
  const auto n = parse_whole_number(std::string_view(claim).substr(kNodeRank.size()), 0, 1 << 30);
  return n ? static_cast<int>(*n) : -1;
}

std::string host_of(int node_rank) { return "node" + std::to_string(node_rank); }

}  // namespace

JoinPort::JoinPort(const LaunchOptions& options) : join_(options.join) {
  try {
    bind_ = join_bind_address(options);
    port_.emplace(bind_, join_.secret, PreauthPolicy{},
                  ConnectBackSettings{"join port", static_cast<std::uint16_t>(join_.endpoint_port),
                                      false, "the job's secret"});
  } catch (const std::exception& e) {
    throw LaunchError(std::string("node 0 cannot listen for the other nodes: ") + e.what() +
                      "; is another job using that port? Choose another port in "
                      "--rdzv-endpoint HOST:PORT on every node");
  }
}

void JoinPort::serve(Clock::time_point until) {
  for (ConnectedAgent& agent : port_->serve(until)) admit(agent);
}

// Why node 0 does not take the node whose hello is `l` and that claims node rank `rank`;
// empty when it does.
std::string JoinPort::refusal(const std::vector<std::string>& l, int rank) const {
  if (l.size() < 4) return "its hello is not a joining node's";
  if (l[1] != join_.run_id)
    return "it belongs to --rdzv-id " + quote(l[1]) + ", this job is " + quote(join_.run_id);
  if (l[2] != kVersionLine)
    return "it runs " + quote(l[2]) + ", node 0 runs " + quote(kVersionLine) +
           "; install the same hvdrun on every node";
  if (rank < 1 || rank >= join_.nnodes) {
    const std::string nnodes =
        join_.elastic() ? std::to_string(join_.min_nodes) + ":" + std::to_string(join_.nnodes)
                        : std::to_string(join_.nnodes);
    return "--nnodes " + nnodes + " takes node ranks 1 to " + std::to_string(join_.nnodes - 1) +
           " besides node 0";
  }
  if (const auto it = joined_.find(rank); it != joined_.end()) {
    // In elastic join the node may be the same node's next pod, come before node 0 has
    // seen the last one go (its link closes at the heartbeat timeout): it tries again.
    return (join_.elastic() ? kJoinLater : "") +
           ("node rank " + std::to_string(rank) + " already joined from " + it->second);
  }
  const std::optional<int> ranks = hello_ranks(l);
  if (!ranks) return "its hello names no count of ranks; install the same hvdrun on every node";
  return count_refusal(join_, *ranks, l.size() < 6 ? std::string() : l[5]);
}

void JoinPort::admit(ConnectedAgent& agent) {
  const std::vector<std::string> l = lines_of(agent.text);
  const std::string claim = l.empty() ? std::string("?") : l[0];
  const int rank = claimed_rank(claim);
  const std::string why = refusal(l, rank);
  if (why.rfind(kJoinLater, 0) == 0) {
    spdlog::info("join port {}: {} claiming to be {} is to try again: {}", join_.endpoint_port,
                 agent.peer, quote(claim), why.substr(std::string_view(kJoinLater).size()));
    send_answer(agent.sock.get(), why);
    return;
  }
  if (!why.empty()) {
    spdlog::warn("join port {}: refused {} claiming to be {}: {}", join_.endpoint_port, agent.peer,
                 quote(claim), why);
    send_answer(agent.sock.get(), why);
    return;
  }
  if (!send_answer(agent.sock.get(), "")) return;
  const std::string& host = l[3];
  joined_[rank] = agent.peer + " (" + host + ")";
  ranks_[rank] = *hello_ranks(l);
  spdlog::info("node rank {} joined from {} ({})", rank, agent.peer, host);
  links_[host_of(rank)] = make_tcp_agent_link(
      host_of(rank), std::move(agent.sock),
      "node rank " + std::to_string(rank) + "'s hvdrun on " + host + " at " + agent.peer);
  changed_ = true;
}

std::map<std::string, std::unique_ptr<AgentLink>> JoinPort::take_links() {
  changed_ = false;
  return std::exchange(links_, {});
}

std::unique_ptr<AgentLink> JoinPort::take(const std::string& host) {
  auto it = links_.find(host);
  if (it == links_.end()) return nullptr;
  std::unique_ptr<AgentLink> link = std::move(it->second);
  links_.erase(it);
  return link;
}

void JoinPort::lost(const std::string& host) {
  for (auto it = ranks_.begin(); it != ranks_.end(); ++it) {
    if (host_of(it->first) != host) continue;
    joined_.erase(it->first);
    ranks_.erase(it);
    links_.erase(host);
    return;
  }
}

std::optional<std::vector<hostfile::HostSlots>> JoinPort::poll() {
  serve(Clock::now());
  if (!std::exchange(changed_, false)) return std::nullopt;
  std::vector<hostfile::HostSlots> nodes = {{host_of(0), join_.ranks_per_node}};
  for (const auto& [rank, n] : ranks_) nodes.push_back({host_of(rank), n});
  return nodes;
}

void follow_joins(const std::shared_ptr<JoinPort>& port, JobHooks& hooks) {
  hooks.grow = [port] { return port->poll(); };
  hooks.open_hosts = [port](const std::vector<std::string>& hosts) {
    std::vector<JobHooks::OpenedHost> out;
    for (const std::string& h : hosts) {
      JobHooks::OpenedHost opened{h, port->take(h), "", LaunchMethod::join, false};
      if (!opened.link)
        opened.error =
            "its node has not joined node 0 again; it joins when its hvdrun starts "
            "with its node rank";
      out.push_back(std::move(opened));
    }
    return out;
  };
  hooks.host_closed = [port](const std::string& host) { port->lost(host); };
}

}  // namespace hvdrun::launcher
