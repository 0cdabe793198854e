// The exec: method: `--launcher exec:COMMAND` runs COMMAND (with `{host}` replaced) per
// host, the agent command appended (exec_agent_link.h), and checks each host's version as
// the SSH preflight does.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/deadline.h"
#include "common/error.h"
#include "common/plural.h"
#include "common/version.h"
#include "launcher/hosts/exec_agent_link.h"
#include "launcher/plan/host_lookup.h"
#include "launcher/plan/start_window.h"
#include "launcher/start/host_start.h"
#include "ssh/session.h"

namespace hvdrun::launcher {

namespace {

// Waits until `deadline` for output from any of `pending`, then hands each one whose answer
// is complete to `done` and drops it.
template <typename Done>
void await_exec_answers(std::vector<std::unique_ptr<PendingExecAgent>>& pending,
                        std::vector<pollfd>& fds, ssh::Clock::time_point deadline, Done done) {
  fds.clear();
  for (const auto& p : pending) fds.push_back({p->fd(), POLLIN, 0});
  const int left = poll_ms_left(deadline);
  const bool late = left == 0;
  if (!late && ::poll(fds.data(), fds.size(), left) < 0 && errno != EINTR) {
    throw_errno("waiting for the exec: commands", "poll");
  }
  // Past the deadline every one still pending is done: its link() says it did not answer.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const bool ready = late || (fds[i].revents != 0 && pending[i]->receive());
    if (ready) {
      done(*pending[i]);
    } else {
      pending[kept++] = std::move(pending[i]);
    }
  }
  pending.resize(kept);
}

// Lookups of exec: host names run side by side, this many at a time, and none is waited for
// longer than this: a name a resolver cannot answer that fast is taken as one that does
// not resolve (the host is then reached by its name).
constexpr std::size_t kLookupsInFlight = 32;
constexpr std::chrono::seconds kLookupBudget{5};

// The lookups an exec: launch needs: an address per host name, for the launcher's own
// address on the route there, unless --network-interface gives that address (then there
// are none to make).
std::unique_ptr<HostLookups> exec_lookups(const std::vector<const PlannedHost*>& hosts,
                                          const LaunchOptions& options,
                                          ssh::Clock::time_point deadline) {
  if (!options.network_interface.empty()) {
    spdlog::debug("exec: hosts: no name lookups (--network-interface {} gives the address)",
                  options.network_interface);
    return nullptr;
  }
  std::vector<std::string> names;
  names.reserve(hosts.size());
  for (const PlannedHost* h : hosts) names.push_back(h->name);
  spdlog::debug("exec: hosts: looking up {} names, {} at a time", names.size(), kLookupsInFlight);
  return std::make_unique<HostLookups>(names, kLookupsInFlight,
                                       std::min(deadline, ssh::Clock::now() + kLookupBudget));
}

// A name the resolver did not answer in time may still be a real host's: its ranks would
// look for the launcher at 127.0.0.1. Say so once, with the way to give the address.
void warn_unanswered(const HostLookups& lookups) {
  const std::vector<std::string> late = lookups.unanswered();
  if (late.empty()) return;
  std::string shown;
  for (std::size_t i = 0; i < late.size() && i < 3; ++i) shown += (i ? ", " : "") + late[i];
  if (late.size() > 3) shown += ", ...";
  spdlog::warn(
      "exec: hosts: the resolver did not answer for {} within {} s ({}); they are taken as "
      "names that do not resolve, so their ranks reach the launcher at 127.0.0.1. If they "
      "are other machines, give --network-interface IF for the address to use",
      counted(static_cast<long long>(late.size()), "name"), kLookupBudget.count(), shown);
}

// Starts the exec: hosts' commands, at most HVDRUN_LAUNCH_CONCURRENCY at a time (a login
// slot is free again once its host's agent has answered), and checks each one's version
// under the start deadline. After a failure no further host is started.
class ExecStarter final : public HostStarter {
 public:
  void start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
             StartTable& table) override;
};

void ExecStarter::start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
                        StartTable& table) {
  const LaunchOptions& options = context.options;
  const auto deadline = context.deadline;
  const std::string remote_hvdrun = expected_remote_hvdrun(options, PreflightSettings{});
  const std::unique_ptr<HostLookups> lookups = exec_lookups(hosts, options, deadline);
  StartWindow window(hosts.size(), launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  std::vector<std::unique_ptr<PendingExecAgent>> pending;
  std::vector<pollfd> fds;
  auto failed = [&](std::string message) {
    table.unreachable.push_back(std::move(message));
    window.stop();
  };
  while (!window.done()) {
    while (auto i = window.next()) {
      const PlannedHost& h = *hosts[*i];
      try {
        pending.push_back(std::make_unique<PendingExecAgent>(
            h.name, context.plan.launcher.exec_argv, remote_hvdrun));
      } catch (const std::exception& e) {
        window.finished();
        failed(e.what());
      }
    }
    if (pending.empty()) continue;
    await_exec_answers(pending, fds, deadline, [&](PendingExecAgent& agent) {
      window.finished();
      try {
        table.links[agent.host()] =
            agent.link(kVersionLine, lookups ? lookups->address(agent.host()) : std::string());
      } catch (const std::exception& e) {
        failed(e.what());
      }
    });
  }
  table.skipped = window.skipped();
  if (lookups) warn_unanswered(*lookups);
}

}  // namespace

std::unique_ptr<HostStarter> make_exec_starter() { return std::make_unique<ExecStarter>(); }

}  // namespace hvdrun::launcher
