// Node 0's port in join mode (docs/kubernetes.md): it admits the nodes that prove the job's
// secret and say a hello node 0 takes (the same --rdzv-id and hvdrun, a free node rank in
// range, a count of ranks node 0 accepts), each as its host's agent link. The join method's
// start (join_start.cc) serves it until the nodes have come; in elastic join (--nnodes
// MIN:MAX) the running job polls it too (follow_joins), so that a node that comes later
// (restarted with its node rank, or new up to MAX) joins as elastic growth adds a host.
//
// After the secret's handshake (connect_back.h) node 0 answers once, before the agent
// protocol starts: u32 length | TEXT, empty when the node is taken, else why it is not
// (kJoinLater and why, when it may try again).
// The joining node's hello TEXT is "node rank I\nRUN_ID\nVERSION\nHOSTNAME\nranks N\nFROM":
// N its --nproc-per-node count, FROM how a word (gpu, cpu, auto) was counted there, or empty
// for a number.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hostfile/hosts.h"
#include "launcher/hosts/agent_link.h"
#include "launcher/hosts/connect_back.h"
#include "launcher/job/job.h"
#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// The start of node 0's answer that asks a joining node to try again later (elastic join:
/// its node rank is still held by the node's last hvdrun); the rest says why.
inline constexpr const char* kJoinLater = "later: ";

/// The join port and the nodes it admitted.
class JoinPort {
 public:
  using Clock = std::chrono::steady_clock;

  /// Listens on the endpoint's port. Throws LaunchError saying what to do when it cannot.
  explicit JoinPort(const LaunchOptions& options);

  /// The address it listens on.
  const std::string& bind_address() const { return bind_; }
  /// Admits the nodes that come until `until`; returns early once one was admitted.
  void serve(Clock::time_point until);
  /// The nodes admitted and not lost (node 0 not among them): node rank -> its ranks.
  const std::map<int, int>& ranks() const { return ranks_; }
  /// Moves out the links of the nodes admitted and not yet taken, by host name (`node` and
  /// the node rank, as the plan names them).
  std::map<std::string, std::unique_ptr<AgentLink>> take_links();
  /// The link of `host` admitted while the job runs, or nullptr.
  std::unique_ptr<AgentLink> take(const std::string& host);
  /// The running job's host `host` ended: its node rank may join again (a pod recreated).
  void lost(const std::string& host);
  /// Polled by the running job (JobHooks::grow): when a node was admitted since the last
  /// call, every node to run on (node 0 and the nodes admitted and not lost, each with its
  /// count of ranks); else nullopt.
  std::optional<std::vector<hostfile::HostSlots>> poll();

 private:
  void admit(ConnectedAgent& agent);
  std::string refusal(const std::vector<std::string>& l, int rank) const;

  JoinOptions join_;
  std::string bind_;
  std::optional<ConnectBackPort> port_;
  std::map<int, std::string> joined_;  // node rank -> where it came from
  std::map<int, int> ranks_;           // node rank -> the ranks its hello said it runs
  std::map<std::string, std::unique_ptr<AgentLink>> links_;
  bool changed_ = false;  // a node was admitted since the last poll()
};

/// Elastic join: the job's hooks follow the nodes through `port` while it runs (growth
/// instead of discovery, the links of the nodes that came, and the nodes lost).
void follow_joins(const std::shared_ptr<JoinPort>& port, JobHooks& hooks);

}  // namespace hvdrun::launcher
