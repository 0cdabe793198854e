// One job from start to end: placement, rendezvous server, one agent per host (started in
// parallel), rank environments, output relay, supervision (first failure ends the job),
// teardown on every path, and the exit code.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/hosts/agent_link.h"
#include "launcher/job/job_context.h"
#include "launcher/plan/launch_options.h"
#include "launcher/plan/launch_plan.h"

namespace hvdrun::rendezvous {
class Server;
}  // namespace hvdrun::rendezvous

namespace hvdrun::launcher {

/// What only tests set: stand-ins for this machine's agents and observers of the job's
/// servers. A real launch leaves every field unset.
struct JobTestHooks {
  /// The executable run as a local host's agent (`EXE agent`); empty: the agent is a fork
  /// of this process (see start_local_agent).
  std::string agent_exe;
  /// Opens the agent link of a host on this machine. Unset: start_local_agent(agent_exe).
  std::function<std::unique_ptr<AgentLink>(const std::string& host)> local_link;
  /// Called once the job's rendezvous server serves (tests inject failures on its
  /// thread through it). Unset: nothing.
  std::function<void(rendezvous::Server&)> on_rendezvous;
  /// How the Horovod rendezvous tells the uid behind a caller's socket, nullopt meaning
  /// another host (HorovodHttpServer::judge_peers_with). Unset: the socket's owner. Tests
  /// play other hosts on loopback with it, to reach the allow-list.
  std::function<std::optional<unsigned>(int)> horovod_peers;
};

/// How the job is wired to the rest of the launch: the links the launch methods opened,
/// when the launch began, and the elastic loop's questions and answers (elastic.cc).
struct JobHooks {
  /// Opens the agent link of a host whose launch method is not local (launch() sets it to
  /// take the link its method's start left). Unset: such a host is a LaunchError.
  std::function<std::unique_ptr<AgentLink>(const std::string& host)> remote_link;
  /// When the launch began (before the SSH preflight): --start-timeout counts from here.
  /// Unset: from the start of run_job.
  std::optional<std::chrono::steady_clock::time_point> launch_start;
  /// When the whole job began (an elastic job's first launch): --timeout counts from here.
  /// Unset: from launch_start.
  std::optional<std::chrono::steady_clock::time_point> job_start;
  /// Asked on every turn of the job loop while ranks run: a reason to stop the job
  /// (every rank torn down, exit code 0, the reason printed) or nullopt. Unset: never.
  std::function<std::optional<std::string>()> should_stop;
  /// Where to leave the failure that decided the job (nullopt after a clean end).
  /// Unset: not kept.
  std::optional<Failure>* outcome = nullptr;
  /// The caller's own children that outlive the launch (an elastic job's discovery script
  /// still running): the sweep of this process's children at its end leaves them alone.
  /// Unset: none.
  std::function<std::vector<pid_t>()> own_children;

  /// In-process elastic recovery (docs/elastic.md): what the elastic loop says when a
  /// generation whose every rank declared the elastic API loses ranks.
  struct Reform {
    /// Hosts that take no rank of the next generation (the blacklist after the failure).
    std::vector<std::string> excluded;
    int min_np = 1;
    std::optional<int> max_np;
    /// The fewest hosts the next generation may run on (elastic join: MIN of --nnodes
    /// MIN:MAX); 1 elsewhere.
    int min_hosts = 1;
  };
  /// Asked on a failure (a rank failed, a host or its agent was lost) in a generation
  /// running in process: counts the reset and blames the hosts, then returns how to
  /// re-form, or nullopt to end the job with that failure (the reset limit is used up).
  /// Set: ranks get a control channel (HVDRUN_CONTROL_FD). Unset: every failure ends the
  /// job.
  std::function<std::optional<Reform>(const Failure&)> reform;
  /// Told when the job moved to `generation` in process: its size, the ranks kept and the
  /// ranks started anew. Unset: nothing.
  std::function<void(int generation, int size, int kept, int started, const std::string& why)>
      reformed;
  /// Asked every turn while a generation runs in process, instead of should_stop: the
  /// usable hosts (discovery's latest answer minus the excluded ones, usable_hosts) when
  /// discovery has answered since the last call, else nullopt. The job retires its
  /// processes on hosts that left and grows onto slots it does not use. Unset: hosts are
  /// followed through should_stop only.
  std::function<std::optional<std::vector<hostfile::HostSlots>>()> grow;
  /// Asked before the job grows or retires processes on discovery's word, a reset of every
  /// rank: nullopt to go on, or why the job must end instead (Horovod's --reset-limit counts
  /// these resets too). Unset: always go on.
  std::function<std::optional<std::string>()> scale;
  /// Opens agent links to `hosts` for a job that grows in process, each with its launch
  /// method as at the launch (a preflight over SSH, the exec: command, an srun step): one
  /// entry per host, the link or nullptr and what went wrong. A host that is this machine
  /// gets no link (`local`): the job starts its agent itself. launch() sets it (open_hosts,
  /// host_start.h) when `reform` is set. Unset: growth restarts the job.
  struct OpenedHost {
    std::string host;
    std::unique_ptr<AgentLink> link;
    std::string error;
    LaunchMethod method = LaunchMethod::ssh;
    bool local = false;
  };
  std::function<std::vector<OpenedHost>(const std::vector<std::string>& hosts)> open_hosts;
  /// Told when the agent link of `host` closed while the job ran (its agent ended or the
  /// connection was lost): elastic join lets that node join again. Unset: nothing.
  std::function<void(const std::string& host)> host_closed;

  /// What only tests set.
  JobTestHooks test;
};

/// Runs the job `options` describes and returns hvdrun's exit code: 0 when every rank
/// exited 0; the first failing rank's code (128+signal for a signal); 130/143/129 after
/// SIGINT/SIGTERM/SIGHUP; 255 when the launch failed (an agent could not start or was lost,
/// a rank could not be started, --start-timeout passed). Throws UsageError for bad input
/// found before anything started; any other exception escapes only after every agent and
/// rank has been stopped.
int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks = {});

/// Same, in `context` (its clock set): the seam the job's unit tests use. Leaves the
/// outcome in `hooks.outcome` when set, as the others do.
int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks,
            JobContext& context);

/// Same, with the plan made from `options` (make_plan) and the context of this process
/// (process_context) and the real clock.
int run_job(const LaunchOptions& options, const JobHooks& hooks = {});

/// --result-file for a launch that ended before any job ran (the preflight failed, a host
/// could not be reached, the launch threw): the verdict `exit_code` with `message`, size 0
/// and no ranks, in the format the job writes (docs/result-file.schema.json). Nothing when
/// `options.result_file` is empty; a file that cannot be written is said on stderr.
void write_unstarted_result_file(const LaunchOptions& options, int exit_code,
                                 const std::string& message,
                                 std::chrono::system_clock::time_point started);

}  // namespace hvdrun::launcher
