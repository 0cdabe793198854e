// Preflight logic against the scripted fake SSH layer: verdicts carried through, the
// version check, local hosts skipped, hosts checked in parallel, sessions handed back,
// and the table / JSON rendering.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "launcher/hosts/check.h"
#include "launcher/hosts/preflight.h"
#include "tests/support/fake_ssh.h"

using namespace hvdrun::launcher;
using hvdrun::ssh::Clock;
using hvdrun::ssh::CommandResult;
using hvdrun::ssh::ExitStatus;
using hvdrun::ssh::shell_quote;
using hvdrun::ssh::SshConfig;
using hvdrun::testing::fake_host_with_version;
using hvdrun::testing::FakeConnector;
using hvdrun::testing::FakeHost;

namespace {

LaunchOptions options_for(const std::vector<std::string>& hosts) {
  LaunchOptions o;
  for (const auto& h : hosts) o.hosts.push_back({h, 1});
  o.remote_hvdrun = "/opt/hvdrun/bin/hvdrun";
  o.start_timeout_s = 5;
  return o;
}

PreflightSettings settings() {
  PreflightSettings s;
  s.expected_version = "hvdrun 9.9.9";
  return s;
}

}  // namespace

TEST_CASE("every verdict is reported per host with its fix", "[preflight]") {
  FakeConnector c;
  c.add("good", fake_host_with_version("hvdrun 9.9.9"));
  c.add("old", fake_host_with_version("hvdrun 0.0.1"));
  c.add("bare", FakeHost{});
  FakeHost locked;
  locked.fail = Verdict::auth;
  locked.detail = "no key accepted";
  locked.fix = "ssh-copy-id -i k -p 22 me@locked";
  c.add("locked", locked);
  auto report = preflight(options_for({"good", "old", "bare", "locked", "ghost"}), SshConfig{}, c,
                          settings());
  REQUIRE(report.hosts.size() == 5);
  CHECK(report.hosts[0].verdict == Verdict::ok);
  CHECK(report.hosts[0].detail == "hvdrun 9.9.9 at /opt/hvdrun/bin/hvdrun");
  CHECK(report.hosts[0].session != nullptr);
  CHECK(report.hosts[1].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[1].detail ==
        "found 'hvdrun 0.0.1' at /opt/hvdrun/bin/hvdrun, expected 'hvdrun 9.9.9'");
  CHECK(report.hosts[1].session == nullptr);
  CHECK(report.hosts[2].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[2].detail.find("/opt/hvdrun/bin/hvdrun not found") == 0);
  CHECK(report.hosts[2].fix.find("--remote-hvdrun PATH") != std::string::npos);
  CHECK(report.hosts[3].verdict == Verdict::auth);
  CHECK(report.hosts[3].fix == "ssh-copy-id -i k -p 22 me@locked");
  CHECK(report.hosts[4].verdict == Verdict::dns);
  CHECK_FALSE(report.ok());
  CHECK(report.failures() == 4);
  auto session = report.take_session("good");
  REQUIRE(session);
  CHECK(session->target().alias == "good");
  CHECK(report.take_session("good") == nullptr);
  CHECK(c.commands().size() == 3);
}

TEST_CASE("local hosts are not contacted, 127.0.0.2 is", "[preflight]") {
  FakeConnector c;
  c.add("127.0.0.2", fake_host_with_version("hvdrun 9.9.9"));
  auto report =
      preflight(options_for({"localhost", "127.0.0.1", "127.0.0.2"}), SshConfig{}, c, settings());
  REQUIRE(report.hosts.size() == 3);
  CHECK(report.hosts[0].local);
  CHECK(report.hosts[1].local);
  CHECK_FALSE(report.hosts[2].local);
  CHECK(report.ok());
  REQUIRE(c.targets().size() == 1);
  CHECK(c.targets()[0].hostname == "127.0.0.2");
}

TEST_CASE("hosts are checked in parallel under one deadline", "[preflight]") {
  FakeConnector c;
  std::vector<std::string> names;
  for (int i = 0; i < 16; ++i) {
    auto h = fake_host_with_version("hvdrun 9.9.9");
    h.delay = std::chrono::milliseconds(300);
    names.push_back("n" + std::to_string(i));
    c.add(names.back(), h);
  }
  FakeHost slow = fake_host_with_version("hvdrun 9.9.9");
  slow.delay = std::chrono::seconds(30);
  c.add("slow", slow);
  names.emplace_back("slow");
  auto opts = options_for(names);
  opts.start_timeout_s = 1;
  auto start = Clock::now();
  auto report = preflight(opts, SshConfig{}, c, settings());
  auto took = Clock::now() - start;
  CHECK(took < std::chrono::milliseconds(2000));
  CHECK(report.failures() == 1);
  CHECK(report.hosts.back().verdict == Verdict::timeout);
}

TEST_CASE("ssh_config and flags reach the connector", "[preflight]") {
  FakeConnector c;
  c.add("node1", fake_host_with_version("hvdrun 9.9.9"));
  auto config = SshConfig::parse("Host node1\n  HostName 10.9.9.9\n  Port 2200\n  User u\n", "cfg");
  auto opts = options_for({"node1"});
  opts.ssh_port = 2300;
  auto report = preflight(opts, config, c, settings());
  REQUIRE(c.targets().size() == 1);
  CHECK(c.targets()[0].hostname == "10.9.9.9");
  CHECK(c.targets()[0].port == 2300);
  CHECK(c.targets()[0].user == "u");
  CHECK(c.commands() == std::vector<std::string>{"node1: /opt/hvdrun/bin/hvdrun --version"});
}

TEST_CASE("the remote path is quoted for the shell", "[preflight]") {
  FakeConnector c;
  c.add("h", fake_host_with_version("hvdrun 9.9.9"));
  auto opts = options_for({"h"});
  opts.remote_hvdrun = "/opt/my tools/hvdrun";
  preflight(opts, SshConfig{}, c, settings());
  CHECK(c.commands() == std::vector<std::string>{"h: '/opt/my tools/hvdrun' --version"});
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
}

TEST_CASE("table and JSON list every host", "[preflight]") {
  FakeConnector c;
  c.add("good", fake_host_with_version("hvdrun 9.9.9"));
  FakeHost refused;
  refused.fail = Verdict::refused;
  refused.detail = "cannot connect (10.0.0.2:22: Connection refused)";
  refused.fix = "start sshd";
  c.add("down", refused);
  auto report = preflight(options_for({"localhost", "good", "down"}), SshConfig{}, c, settings());
  auto table = render_table(report);
  CHECK(table.find("HOST") == 0);
  CHECK(table.find("localhost") != std::string::npos);
  CHECK(table.find("good:22") != std::string::npos);
  CHECK(table.find("refused") != std::string::npos);
  CHECK(table.find("fix: start sshd") != std::string::npos);
  CHECK(table.find("3 hosts (2 over SSH) checked in") != std::string::npos);
  CHECK(table.find("1 failed") != std::string::npos);
  auto json = render_json(report);
  CHECK(json.find("{\"ok\": false") == 0);
  CHECK(json.find("\"verdict\": \"refused\"") != std::string::npos);
  CHECK(json.find("\"host\": \"localhost\", \"local\": true") != std::string::npos);
  CHECK(json.find("\"fix\": \"start sshd\"") != std::string::npos);
}

TEST_CASE("where a slow host's time goes: the login, then the remote shell", "[preflight]") {
  // The remote command answers 400 ms after the login, as a shell whose start-up files
  // take that long does.
  FakeConnector c;
  FakeHost slow = fake_host_with_version("hvdrun 9.9.9");
  slow.run = [quick = slow.run](const std::string& command) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return quick(command);
  };
  c.add("slow", slow);
  c.add("quick", fake_host_with_version("hvdrun 9.9.9"));
  auto report = preflight(options_for({"slow", "quick"}), SshConfig{}, c, settings());
  REQUIRE(report.ok());
  CHECK(report.hosts[0].shell >= std::chrono::milliseconds(400));
  CHECK(report.hosts[0].login <= report.hosts[0].latency - report.hosts[0].shell);
  CHECK(report.hosts[0].detail == "hvdrun 9.9.9 at /opt/hvdrun/bin/hvdrun");
  // The note is for --verbose: every run of a plain check would repeat it.
  CHECK(render_table(report).find("note:") == std::string::npos);
  const std::string table = render_table(report, true);
  INFO(table);
  CHECK(table.find("note: logged in after ") != std::string::npos);
  CHECK(table.find("ms to start hvdrun (its start-up files, e.g. ~/.bashrc, or a busy host)") !=
        std::string::npos);
  CHECK(render_json(report).find("\"shell_ms\": ") != std::string::npos);
}

TEST_CASE("a huge or non-ASCII host name is cut in the table, never inside a character",
          "[preflight]") {
  FakeConnector c;
  std::string huge;
  for (int i = 0; i < 50000; ++i) huge += "\xc3\xa9";  // 100,000 bytes of 'é'
  FakeHost down;
  down.fail = Verdict::dns;
  down.detail = "cannot resolve '" + huge + "'";
  c.add(huge, down);
  c.add("good", fake_host_with_version("hvdrun 9.9.9"));
  auto report = preflight(options_for({huge, "good"}), SshConfig{}, c, settings());
  const std::string table = render_table(report);
  CHECK(table.size() < 2000);
  std::string cut;
  for (int i = 0; i < 45; ++i) cut += "\xc3\xa9";
  CHECK(table.find("\n" + cut + "...  ") != std::string::npos);
  // The columns after it line up with the header's, counted in characters.
  const auto header_verdict = table.find("VERDICT");
  const auto good = table.find("\ngood") + 1;
  CHECK(table.find("ok", good) - good == header_verdict);
  CHECK(render_json(report).find(huge) != std::string::npos);  // --json keeps it whole
}

TEST_CASE("verdict names are the documented ones", "[preflight]") {
  CHECK(to_string(Verdict::not_ssh) == "not-ssh");
  CHECK(to_string(Verdict::host_key_unknown) == "host-key-unknown");
  CHECK(to_string(Verdict::host_key_changed) == "host-key-changed");
  CHECK(to_string(Verdict::hvdrun_missing) == "hvdrun-missing");
  ExitStatus s;
  s.signal = "TERM";
  CHECK(s.shell_code() == 143);
}

TEST_CASE("shell start-up noise before the version line is tolerated", "[preflight]") {
  FakeConnector c;
  FakeHost noisy;
  noisy.run = [](const std::string&) {
    CommandResult r;
    r.out = "Welcome to the cluster\nhvdrun 9.9.9\n";
    return r;
  };
  c.add("noisy", noisy);
  auto report = preflight(options_for({"noisy"}), SshConfig{}, c, settings());
  CHECK(report.ok());
  CHECK(report.hosts[0].detail == "hvdrun 9.9.9 at /opt/hvdrun/bin/hvdrun");
}

TEST_CASE("the topology probe comes back after the version, and its failure is named",
          "[preflight]") {
  FakeConnector c;
  FakeHost good;
  good.run = [](const std::string& command) {
    CommandResult r;
    CHECK(command == shell_quote("/opt/hvdrun/bin/hvdrun") + " --version && echo " +
                         kTopologyMarker + " && exec " + shell_quote("/opt/hvdrun/bin/hvdrun") +
                         " agent --topology");
    r.out = "Welcome\nhvdrun 9.9.9\n" + std::string(kTopologyMarker) + "\ngpus -\nfrom hwloc\n";
    return r;
  };
  FakeHost broken;
  broken.run = [](const std::string&) {
    CommandResult r;
    r.out = "hvdrun 9.9.9\n" + std::string(kTopologyMarker) + "\n";
    r.err = "hvdrun agent: error: hwloc: no topology\n";
    r.status.code = 250;
    return r;
  };
  c.add("good", good);
  c.add("broken", broken);
  PreflightSettings s = settings();
  s.read_topology = true;
  auto report = preflight(options_for({"good", "broken"}), SshConfig{}, c, s);
  CHECK(report.hosts[0].verdict == Verdict::ok);
  CHECK(report.hosts[0].topology == "gpus -\nfrom hwloc\n");
  CHECK(report.hosts[1].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[1].detail ==
        "`/opt/hvdrun/bin/hvdrun agent --topology` exited with 250: hvdrun agent: error: hwloc: "
        "no topology");
  CHECK(report.hosts[1].fix ==
        "run `/opt/hvdrun/bin/hvdrun agent --topology` on broken to see why (hwloc reads the "
        "host's hardware there)");
}

TEST_CASE("self_executable names the running binary", "[preflight]") {
  CHECK(self_executable().find("launcher_test") != std::string::npos);
}
