// Join mode's layout of ranks over nodes, and which nodes' counts may differ.
#include "launcher/plan/join_layout.h"

#include <string>
#include <utility>

#include "common/env_names.h"
#include "common/error.h"

namespace hvdrun::launcher {

namespace {

// "it counts its own ranks (--nproc-per-node gpu: 3 from hwloc)", "it was given a number
// (--nproc-per-node 3)".
std::string how_counted(const std::string& who, int ranks, const std::string& from) {
  if (from.empty())
    return who + " was given a number (--nproc-per-node " + std::to_string(ranks) + ")";
  return who + " counts its own ranks (" + from + ")";
}

}  // namespace

std::vector<JoinNode> join_layout(const std::vector<int>& ranks_per_node) {
  std::vector<JoinNode> out;
  long long next = 0;
  for (std::size_t i = 0; i < ranks_per_node.size(); ++i) {
    const int n = ranks_per_node[i];
    const std::string name = "node" + std::to_string(i);
    if (n < 1)
      throw UsageError("node rank " + std::to_string(i) + " runs " + std::to_string(n) +
                       " ranks; every node runs at least one: give --nproc-per-node 1 or more");
    if (next + n > env_names::kMaxRanks)
      throw UsageError("the nodes' --nproc-per-node counts add up to more than " +
                       std::to_string(env_names::kMaxRanks) +
                       " ranks, more than a job may have; give fewer ranks per node or fewer "
                       "nodes");
    out.push_back({name, static_cast<int>(next), n});
    next += n;
  }
  return out;
}

LaunchOptions laid_out(LaunchOptions options, const std::vector<JoinNode>& layout) {
  options.hosts.clear();
  int np = 0;
  for (const JoinNode& node : layout) {
    options.hosts.push_back({node.name, node.ranks});
    np += node.ranks;
  }
  options.np = np;
  return options;
}

std::string layout_text(const std::vector<JoinNode>& layout) {
  std::string out;
  for (const JoinNode& node : layout) {
    if (!out.empty()) out += ", ";
    out += node.name + ": ";
    if (node.ranks == 1) {
      out += "rank " + std::to_string(node.first_rank);
    } else {
      out += "ranks " + std::to_string(node.first_rank) + "-" +
             std::to_string(node.first_rank + node.ranks - 1);
    }
  }
  return out;
}

std::string count_refusal(const JoinOptions& mine, int theirs, const std::string& theirs_from) {
  const bool my_word = !mine.ranks_per_node_from.empty();
  const bool their_word = !theirs_from.empty();
  if (my_word && their_word) return {};
  if (my_word != their_word)
    return how_counted("it", theirs, theirs_from) + " and " +
           how_counted("node 0", mine.ranks_per_node, mine.ranks_per_node_from) +
           "; nodes may run different numbers of ranks only when every node counts its own: "
           "give every node the same --nproc-per-node (gpu, cpu or auto on every node, or the "
           "same number on every node)";
  if (theirs == mine.ranks_per_node) return {};
  // Two numbers: one of them is a typo.
  return "it runs " + std::to_string(theirs) + " ranks per node, node 0 runs " +
         std::to_string(mine.ranks_per_node) +
         "; every node runs as many: give every node the same --nproc-per-node number";
}

}  // namespace hvdrun::launcher
