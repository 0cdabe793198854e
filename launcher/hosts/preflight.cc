// Parallel preflight: a bounded pool of threads, one host at a time each, every host
// under the job's --start-timeout deadline. Threads rather than one event loop because
// the work is mostly key-exchange and signature crypto: threads put it on every core,
// and each host's poll() wait costs nothing while others compute.
#include "launcher/hosts/preflight.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <spdlog/spdlog.h>

#include "ssh/session.h"

namespace hvdrun::launcher {
namespace {

using ssh::Clock;
using ssh::CommandResult;
using ssh::Deadline;
using ssh::Target;

std::string first_line(const std::string& text) {
  auto end = text.find('\n');
  std::string line = text.substr(0, end);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

// The remote command: the version, and the agent or the topology probe in the same shell.
std::string remote_command(const std::string& remote_hvdrun, const PreflightSettings& settings) {
  const std::string hvdrun = ssh::shell_quote(remote_hvdrun);
  if (settings.start_agent)
    return hvdrun + " --version && echo " + kAgentMarker + " && exec " + hvdrun + " agent";
  if (settings.read_topology)
    return hvdrun + " --version && echo " + kTopologyMarker + " && exec " + hvdrun +
           " agent --topology";
  return hvdrun + " --version";
}

// What follows the topology marker's line in `out`; the whole of `out` is cut to before it.
std::string split_at_marker(std::string& out) {
  const std::string line = std::string(kTopologyMarker) + "\n";
  const auto at = out.rfind(line);
  if (at == std::string::npos || (at != 0 && out[at - 1] != '\n')) return {};
  std::string after = out.substr(at + line.size());
  out.resize(at);
  return after;
}

void check_one(HostCheck& check, const Target& target, ssh::Connector& connector, Deadline deadline,
               const std::string& remote_hvdrun, const PreflightSettings& settings) {
  const std::string& expected_version = settings.expected_version;
  const auto start = Clock::now();
  check.address = target.hostname + ":" + std::to_string(target.port);
  auto finish = [&] {
    check.latency = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  };
  try {
    auto session = connector.connect(target, deadline);
    const auto logged_in = Clock::now();
    check.login = std::chrono::duration_cast<std::chrono::milliseconds>(logged_in - start);
    check.address = session->peer_address().empty() ? check.address : session->peer_address();
    const std::string where = target.user + "@" + target.hostname;
    CommandResult result;
    std::unique_ptr<ssh::Channel> agent;
    std::string after_marker;
    try {
      const std::string command = remote_command(remote_hvdrun, settings);
      if (settings.start_agent) {
        // One shell for both: the agent then waits, silent, for the launcher's hello.
        agent =
            ssh::run_until_marker(*session, command, kAgentMarker, deadline, result, after_marker);
      } else {
        result = ssh::run_command(*session, command, deadline);
      }
    } catch (const ssh::SessionError& e) {
      check.verdict = Verdict::timeout;
      check.detail = "`" + remote_hvdrun + " --version` did not answer: " + e.what();
      check.fix = "check that " + remote_hvdrun + " runs on the host; raise --start-timeout";
      finish();
      return;
    }
    if (settings.read_topology) check.topology = split_at_marker(result.out);
    // Shell start-up files on the host may print before hvdrun does: any line of the
    // output that is exactly the expected version counts.
    bool found = false;
    for (std::size_t pos = 0; pos < result.out.size() && !found;) {
      auto end = result.out.find('\n', pos);
      found = first_line(result.out.substr(pos, end == std::string::npos ? end : end - pos)) ==
              expected_version;
      pos = end == std::string::npos ? result.out.size() : end + 1;
    }
    std::string line = first_line(result.out);
    const int code = result.status.shell_code();
    if (code == 0 && found && after_marker.empty()) {
      line = expected_version;
      check.verdict = Verdict::ok;
      check.detail = line + " at " + remote_hvdrun;
      if (!session->note().empty()) check.detail += "; " + session->note();
      // Where a slow host's time goes: the login is logged by the session; the rest is the
      // remote shell, whose start-up files run before hvdrun does.
      check.shell = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - logged_in);
      spdlog::debug("ssh {}: the remote shell started `hvdrun --version` {} ms after the login",
                    target.alias, check.shell.count());
      check.session = std::move(session);
      check.agent_channel = std::move(agent);
      finish();
      return;
    }
    check.verdict = Verdict::hvdrun_missing;
    const std::string install = "install " + expected_version + " at " + remote_hvdrun + " on " +
                                target.alias + " (same path as here), or pass --remote-hvdrun PATH";
    if (code != 0 && found && settings.read_topology) {
      // The version answered; the topology probe after it did not.
      std::string why = first_line(result.err);
      check.detail = "`" + remote_hvdrun + " agent --topology` exited with " +
                     std::to_string(code) + (why.empty() ? "" : ": " + why);
      check.fix = "run `" + remote_hvdrun + " agent --topology` on " + target.alias +
                  " to see why (hwloc reads the host's hardware there)";
      finish();
      return;
    }
    if (code == 127 || code == 126) {
      std::string why = first_line(result.err);
      check.detail = remote_hvdrun + (code == 127 ? " not found" : " not executable") +
                     (why.empty() ? "" : " (" + why + ")");
    } else if (code != 0) {
      std::string why = first_line(result.err);
      check.detail = "`" + remote_hvdrun + " --version` exited with " + std::to_string(code) +
                     (why.empty() ? "" : ": " + why);
    } else if (found) {
      // An agent of this version waits for the launcher before it says anything.
      check.detail = "the agent at " + remote_hvdrun + " spoke before it was asked";
    } else {
      check.detail =
          "found '" + line + "' at " + remote_hvdrun + ", expected '" + expected_version + "'";
    }
    check.fix = install;
  } catch (const ssh::ConnectError& e) {
    check.verdict = e.verdict();
    if (!e.address().empty()) check.address = e.address();
    check.detail = e.detail();
    check.fix = e.fix();
  } catch (const std::exception& e) {
    check.verdict = Verdict::refused;
    check.detail = e.what();
    check.fix = "see the message; run with --log-level debug for more";
  }
  finish();
}

}  // namespace

bool PreflightReport::ok() const { return failures() == 0; }

int PreflightReport::failures() const {
  return static_cast<int>(std::count_if(
      hosts.begin(), hosts.end(), [](const HostCheck& h) { return h.verdict != Verdict::ok; }));
}

std::unique_ptr<ssh::Session> PreflightReport::take_session(const std::string& host) {
  for (auto& h : hosts) {
    if (h.host == host && h.session) return std::move(h.session);
  }
  return nullptr;
}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "hvdrun";
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string expected_remote_hvdrun(const LaunchOptions& options,
                                   const PreflightSettings& settings) {
  if (!settings.remote_hvdrun.empty()) return settings.remote_hvdrun;
  if (!options.remote_hvdrun.empty()) return options.remote_hvdrun;
  return self_executable();
}

ssh::SshOptions ssh_options(const LaunchOptions& options) {
  ssh::SshOptions o;
  o.port = options.ssh_port;
  o.identity_file = options.ssh_identity_file;
  o.config_file = options.ssh_config;
  o.start_timeout_s = options.start_timeout_s;
  return o;
}

PreflightReport preflight(const LaunchOptions& options, ssh::Connector& connector,
                          const PreflightSettings& settings) {
  return preflight(options, ssh::SshConfig::load_for(options.ssh_config), connector, settings);
}

PreflightReport preflight(const LaunchOptions& options, const ssh::SshConfig& config,
                          ssh::Connector& connector, const PreflightSettings& settings) {
  return preflight(make_check_plan(options), options, config, connector, settings);
}

PreflightReport preflight(const LaunchPlan& plan, const LaunchOptions& options,
                          const ssh::SshConfig& config, ssh::Connector& connector,
                          const PreflightSettings& settings) {
  const auto start = Clock::now();
  const Deadline deadline = start + std::chrono::seconds(std::max(options.start_timeout_s, 1));
  const std::string remote_hvdrun = expected_remote_hvdrun(options, settings);
  const ssh::SshOptions ssh_opts = ssh_options(options);

  PreflightReport report;
  std::vector<Target> targets;
  std::vector<std::size_t> remote;  // indexes into report.hosts
  for (const auto& h : plan.hosts) {
    HostCheck check;
    check.host = h.name;
    if (h.method != LaunchMethod::ssh) {
      check.local = true;
      check.address = "-";
      check.detail = h.method == LaunchMethod::local   ? "this machine: runs without SSH"
                     : h.method == LaunchMethod::slurm ? "started by srun: not checked over SSH"
                                                       : "reached by the exec: command: not "
                                                         "checked over SSH";
    } else {
      remote.push_back(report.hosts.size());
      targets.push_back(ssh::resolve_target(h.name, config, ssh_opts));  // UsageError surfaces here
    }
    report.hosts.push_back(std::move(check));
  }

  // Create spdlog's registry here, on the calling thread, before the workers log (its
  // lazy creation inside the uninstrumented library reads as a race to TSan).
  spdlog::default_logger_raw();
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < remote.size();) {
      check_one(report.hosts[remote[i]], targets[i], connector, deadline, remote_hvdrun, settings);
    }
  };
  const std::size_t n_threads = std::min<std::size_t>(
      remote.size(), static_cast<std::size_t>(std::max(settings.max_parallel, 1)));
  if (n_threads <= 1) {
    worker();
  } else {
    std::vector<std::jthread> threads;
    threads.reserve(n_threads);
    for (std::size_t i = 0; i < n_threads; ++i) threads.emplace_back(worker);
  }
  report.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return report;
}

}  // namespace hvdrun::launcher
