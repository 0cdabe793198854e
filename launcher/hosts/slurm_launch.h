// `--launcher slurm`: one `hvdrun agent` per node, all started by a single `srun` step
// (`--nodes N --ntasks N --ntasks-per-node 1 --nodelist ...`, the allocation's
// environment otherwise untouched). Each agent connects back to the launcher over TCP and
// proves it holds the step's secret, which travels in srun's environment, never on a
// command line. The step ends when its agents do; past the teardown deadline it is
// cancelled (scancel JOB.STEP), so nothing is left on any node.
//
// The connect-back port and its handshake: launcher/hosts/connect_back.h.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "launcher/hosts/agent_link.h"

namespace hvdrun::launcher {

/// The variables srun passes to the agents.
inline constexpr const char* kAgentConnectEnv =
    "HVDRUN_AGENT_CONNECT";                                            ///< ADDR:PORT[,ADDR:PORT...]
inline constexpr const char* kAgentSecretEnv = "HVDRUN_AGENT_SECRET";  ///< hex secret
/// The launcher's machine_identity() (boot id and network namespace).
inline constexpr const char* kAgentBootIdEnv = "HVDRUN_AGENT_BOOT_ID";

/// How the step is started.
struct SlurmStepSpec {
  /// Nodes, in plan order; each gets one agent.
  std::vector<std::string> nodes;
  /// hvdrun on the nodes.
  std::string remote_hvdrun;
  /// The srun program (PATH lookup when bare).
  std::string srun = "srun";
  /// Address to listen on ("0.0.0.0", or --network-interface's).
  std::string bind_address = "0.0.0.0";
  /// Every agent must have connected by then.
  std::chrono::steady_clock::time_point deadline;
};

/// Starts the step and waits for every node's agent. Returns one link per node. Throws
/// LaunchError naming the nodes that did not connect, srun's exit and what to do.
std::map<std::string, std::unique_ptr<AgentLink>> start_slurm_agents(const SlurmStepSpec& spec);

/// A link to an agent over the connected TCP socket `sock` that proved the secret (a
/// Slurm node's, or a joined node's in join mode); describe() says `what`.
std::unique_ptr<AgentLink> make_tcp_agent_link(const std::string& node, UniqueFd sock,
                                               const std::string& what);

/// The srun command line of a step (no secret in it): for messages, tests and --verbose.
std::vector<std::string> srun_command(const SlurmStepSpec& spec);

/// `hvdrun agent`'s entry: with HVDRUN_AGENT_CONNECT set (started by srun), connects back
/// and authenticates, then runs the agent on the socket; otherwise on stdin/stdout.
int run_agent_main();

}  // namespace hvdrun::launcher
