// The launch methods' common table: each host's link is taken once, a failure of any
// method makes the start fail, the report says which hosts and leaves the preflight's
// failure for the caller; an exec: start whose command fails fills the table with it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <memory>
#include <optional>

#include "common/error.h"
#include "common/exit_status.h"
#include "launcher/start/host_start.h"
#include "tests/launcher/fake_job.h"

using namespace hvdrun::launcher;
using hvdrun::LaunchError;
using hvdrun::testing::FakeAgentLink;
using hvdrun::testing::FakeAgentRecord;

namespace {

std::unique_ptr<AgentLink> fake_link() {
  return std::make_unique<FakeAgentLink>(hvdrun::testing::FakeAgentScript{},
                                         std::make_shared<FakeAgentRecord>());
}

HostCheck check(const std::string& host, Verdict verdict) {
  HostCheck c;
  c.host = host;
  c.verdict = verdict;
  return c;
}

}  // namespace

TEST_CASE("start table: each host's link is taken once, a missing one names the host") {
  StartTable table;
  table.links["node1"] = fake_link();
  CHECK(table.ok());
  CHECK(table.take("node1") != nullptr);
  CHECK_THROWS_WITH(table.take("node1"), Catch::Matchers::Contains("host node1 has no agent link"));
  CHECK_THROWS_WITH(table.take("node2"), Catch::Matchers::Contains("host node2"));
  CHECK_THROWS_AS(table.take("node3"), LaunchError);
}

TEST_CASE("start table: a host that was not reached or failed the preflight fails the start") {
  StartTable unreachable;
  unreachable.unreachable.emplace_back("host node3: the exec: command exited with status 3");
  CHECK_FALSE(unreachable.ok());

  StartTable passed;
  passed.preflight.emplace();
  passed.preflight->hosts.push_back(check("node1", Verdict::ok));
  CHECK(passed.ok());

  StartTable refused;
  refused.preflight.emplace();
  refused.preflight->hosts.push_back(check("node1", Verdict::ok));
  refused.preflight->hosts.push_back(check("node2", Verdict::auth));
  CHECK_FALSE(refused.ok());

  // Only the preflight names the hosts to blame in the outcome (elastic mode reads it);
  // an unreachable host's outcome carries the message and is final (no elastic restart).
  std::optional<Failure> outcome;
  CHECK(report_start_failures(refused, &outcome) == hvdrun::exit_status::kLaunchFailed);
  REQUIRE(outcome);
  CHECK(outcome->exit_code == hvdrun::exit_status::kLaunchFailed);
  CHECK(outcome->hosts == std::vector<std::string>{"node2"});

  std::optional<Failure> unreached;
  CHECK(report_start_failures(unreachable, &unreached) == hvdrun::exit_status::kLaunchFailed);
  REQUIRE(unreached);
  CHECK(unreached->final);
  CHECK(unreached->hosts.empty());
  CHECK(unreached->message ==
        "hvdrun: 1 host could not be reached; nothing was started:\n"
        "  host node3: the exec: command exited with status 3\n");
}

TEST_CASE("start: an exec: command that fails is the table's failure, later hosts not tried") {
  LaunchPlan plan;
  plan.launcher.kind = LauncherChoice::exec;
  plan.launcher.exec_argv = {"sh", "-c", "echo refused >&2; exit 3", "{host}"};
  for (const char* name : {"e1", "e2", "e3"}) {
    PlannedHost h;
    h.name = name;
    h.slots = 1;
    h.local = false;
    h.method = LaunchMethod::exec;
    plan.hosts.push_back(h);
  }
  LaunchOptions options;
  options.network_interface = "lo";  // no name lookups
  options.remote_hvdrun = "/nonexistent/hvdrun";
  ::setenv("HVDRUN_LAUNCH_CONCURRENCY", "1", 1);
  StartTable table =
      start_hosts({plan, options, std::chrono::steady_clock::now() + std::chrono::seconds(30)});
  ::unsetenv("HVDRUN_LAUNCH_CONCURRENCY");
  CHECK_FALSE(table.ok());
  REQUIRE(table.unreachable.size() == 1);
  CHECK_THAT(table.unreachable[0], Catch::Matchers::Contains("e1"));
  CHECK(table.skipped == 2);
  CHECK(table.links.empty());
  CHECK_FALSE(table.preflight);
}
