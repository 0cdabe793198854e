// hvdrun's entry point: parse the command line, dispatch, map the outcome to an exit code.
// All the work lives in the libraries (cli/, launcher/) that the tests link too.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/options.h"
#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd_limit.h"
#include "compat/check_build.h"
#include "launcher/agent/agent.h"
#include "launcher/elastic/elastic.h"
#include "launcher/hosts/check.h"
#include "launcher/hosts/host_topologies.h"
#include "launcher/hosts/slurm_launch.h"
#include "launcher/job/job.h"
#include "launcher/job/stacks_socket.h"
#include "launcher/plan/launch_plan.h"
#include "launcher/plan/rank_env.h"
#include "launcher/start/launch.h"

namespace {

// A closed stdin/stdout/stderr would let a pipe or file take its number and be mixed up
// with it; park /dev/null there instead.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) {
      int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) {
        ::dup2(n, fd);
        ::close(n);
      }
    }
  }
}

void setup_logging(const hvdrun::launcher::LaunchOptions& o, const char* pattern) {
  auto logger = spdlog::stderr_logger_st("hvdrun");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(pattern);
  spdlog::set_level(o.verbose ? spdlog::level::debug : spdlog::level::from_str(o.log_level));
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "hvdrun: error: %s\nTry 'hvdrun --help'.\n", what.c_str());
  return hvdrun::exit_status::kUsage;
}

// Runs the job. With --result-file, an earlier run's file is removed first (a reader never
// takes it for this run's), and a launch that ended before any job wrote one (the
// preflight failed, a host was unreachable, the launch threw) still leaves one.
int run_launch(const hvdrun::launcher::LaunchOptions& o) {
  namespace launcher = hvdrun::launcher;
  const auto started = std::chrono::system_clock::now();
  if (!o.result_file.empty() && !(o.join.enabled() && o.join.node_rank != 0))
    std::remove(o.result_file.c_str());
  std::optional<launcher::Failure> outcome;
  std::string message;
  int code = hvdrun::exit_status::kLaunchFailed;
  try {
    // In elastic join the generations are node 0's; another node is an agent of them all.
    if (o.elastic.enabled() && !(o.join.enabled() && o.join.node_rank != 0)) {
      code = launcher::run_elastic(o);
    } else {
      launcher::JobHooks hooks;
      hooks.outcome = &outcome;
      code = launcher::launch(o, std::move(hooks));
    }
  } catch (const hvdrun::UsageError& e) {
    code = usage_error(e.what());
    message = std::string("hvdrun: error: ") + e.what() + "\n";
  } catch (const std::exception& e) {
    message = std::string("hvdrun: error: ") + e.what() + "\n";
    std::fputs(message.c_str(), stderr);
  }
  // In join mode the job, and its file, is node 0's; the other nodes write none.
  const bool joined_node = o.join.enabled() && o.join.node_rank != 0;
  if (!o.result_file.empty() && !joined_node && ::access(o.result_file.c_str(), F_OK) != 0) {
    if (message.empty() && outcome) message = outcome->message;
    if (message.empty())
      message = "hvdrun: the job did not start (exit code " + std::to_string(code) +
                "); hvdrun's stderr says why\n";
    launcher::write_unstarted_result_file(o, code, message, started);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds();
  // A job holds a few descriptors per rank and per host; ranks get the limit back.
  hvdrun::raise_fd_limit();
  std::vector<std::string> args(argv + 1, argv + argc);
  hvdrun::cli::Command cmd;
  try {
    cmd = hvdrun::cli::parse_command_line(args);
  } catch (const hvdrun::UsageError& e) {
    return usage_error(e.what());
  }

  using hvdrun::cli::Action;
  // Join mode's secret is the job's, not the ranks': none of them inherits it.
  ::unsetenv("HVDRUN_JOB_SECRET");
  // In join mode srun's tasks are the nodes (`srun --ntasks-per-node=1 hvdrun --nnodes ...`).
  if ((cmd.action == Action::run && !cmd.options.join.enabled()) || cmd.action == Action::check) {
    // `srun hvdrun ...` in a batch script: every task would launch the whole job. Refuse at
    // once, in one voice (task 0's), before anything starts.
    if (auto refusal = hvdrun::launcher::srun_task_refusal(
            [](const char* name) -> const char* { return std::getenv(name); })) {
      return refusal->print ? usage_error(refusal->message) : hvdrun::exit_status::kUsage;
    }
  }
  switch (cmd.action) {
    case Action::help:
    case Action::version:
      std::fputs(cmd.help_text.c_str(), stdout);
      return hvdrun::exit_status::kOk;
    case Action::check_build:
      std::fputs(hvdrun::compat::check_build_report().c_str(), stdout);
      return hvdrun::exit_status::kOk;
    case Action::check:
      setup_logging(cmd.options, "hvdrun: [%l] %v");
      try {
        return hvdrun::launcher::run_check(cmd.options);
      } catch (const hvdrun::UsageError& e) {
        return usage_error(e.what());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
        return hvdrun::exit_status::kLaunchFailed;
      }
    case Action::agent:
      setup_logging(cmd.options, "hvdrun agent: [%l] %v");
      try {
        return hvdrun::launcher::run_agent_main();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hvdrun agent: error: %s\n", e.what());
        return hvdrun::exit_status::kAgentFailed;
      }
    case Action::agent_topology:
      try {
        std::fputs(hvdrun::launcher::topology_probe_text().c_str(), stdout);
        return hvdrun::exit_status::kOk;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hvdrun agent: error: %s\n", e.what());
        return hvdrun::exit_status::kAgentFailed;
      }
    case Action::stacks:
      try {
        return hvdrun::launcher::run_stacks_client(
            cmd.stacks_pid > 0 ? std::optional<int>(cmd.stacks_pid) : std::nullopt);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hvdrun stacks: %s\n", e.what());
        return hvdrun::exit_status::kUsage;
      }
    case Action::run:
      break;
  }

  setup_logging(cmd.options, "hvdrun: [%l] %v");
  for (const auto& name : hvdrun::launcher::unset_env_names(environ, cmd.options.env)) {
    if (name.back() == '*') {
      spdlog::warn("-x {0}: no variable set here matches {0}, so it forwards nothing", name);
    } else {
      spdlog::warn(
          "-x {0}: {0} is not set here, so no rank gets it; set it before hvdrun, or "
          "write -x {0}=VALUE",
          name);
    }
  }
  // SIGUSR1 and SIGUSR2 are for the ranks: the job loop takes them in its wait and
  // forwards them. Blocked from here on (in every thread started later; children unblock
  // them), so that one arriving while the hosts start, or between two generations of an
  // elastic job, stays pending instead of ending hvdrun, and reaches the ranks once the
  // job loop runs. Only blocked: the job loop's SignalMask installs the handler, and
  // nothing else of this process's signal handling (SIGPIPE's) changes before it. SIGQUIT
  // (the stack report) the same: one that comes during the start asks for a report once
  // the job loop runs, instead of ending hvdrun with a core dump.
  sigset_t for_the_ranks;
  sigemptyset(&for_the_ranks);
  sigaddset(&for_the_ranks, SIGUSR1);
  sigaddset(&for_the_ranks, SIGUSR2);
  sigaddset(&for_the_ranks, SIGQUIT);
  ::pthread_sigmask(SIG_BLOCK, &for_the_ranks, nullptr);
  return run_launch(cmd.options);
}
