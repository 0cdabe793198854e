// Join mode's layout of ranks over nodes (docs/kubernetes.md): node I's ranks follow node
// I-1's, so each node's ranks are contiguous and node 0 holds rank 0. With a number for
// --nproc-per-node every node runs that many; with gpu, cpu or auto each node counts its
// own, the counts may differ, and node 0 lays the ranks out from the counts the nodes'
// hellos carry, once every node has joined and before any rank starts. One home for that
// arithmetic and for the rule of which counts may differ, so the plan made on the command
// line and the one node 0 makes after the hellos cannot drift apart.
#pragma once

#include <string>
#include <vector>

#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// One node's share of a join-mode job.
struct JoinNode {
  /// Its host in the plan: "node" and its node rank (HVDRUN_HOSTNAME of its ranks).
  std::string name;
  /// Its first rank: it runs ranks first_rank to first_rank + ranks - 1.
  int first_rank = 0;
  /// How many ranks it runs.
  int ranks = 0;

  bool operator==(const JoinNode&) const = default;
};

/// The nodes of a job whose node I runs `ranks_per_node[I]` ranks, in node-rank order, each
/// node's ranks after the previous node's. Throws UsageError for a count below 1 or for more
/// ranks in all than a job may have.
std::vector<JoinNode> join_layout(const std::vector<int>& ranks_per_node);

/// `options` with the hosts and -np of `layout`: each node a host with its ranks as slots,
/// in node-rank order (make_plan places the ranks as `layout` says).
LaunchOptions laid_out(LaunchOptions options, const std::vector<JoinNode>& layout);

/// The layout as one line for node 0's log: "node0: ranks 0-1, node1: rank 2, node2:
/// ranks 3-5".
std::string layout_text(const std::vector<JoinNode>& layout);

/// Why node 0, whose count is `mine`'s (ranks_per_node, and ranks_per_node_from, empty for a
/// number), refuses a joining node that runs `theirs` ranks counted as `theirs_from` (empty
/// when it was given a number); empty when it may join. Counts may differ only when both
/// nodes counted their own (gpu, cpu or auto): two numbers must be equal, so that a typo in
/// one node's manifest is caught, and a number beside a word is refused whatever the
/// counts, so that every node of a job follows one rule.
std::string count_refusal(const JoinOptions& mine, int theirs, const std::string& theirs_from);

}  // namespace hvdrun::launcher
