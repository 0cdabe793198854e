// The real SSH layer against real sshd on loopback: exec channels, and every preflight
// verdict produced by a real condition (closed port, silent listener, unknown key,
// changed host key, strict checking, unresolvable name, missing or wrong hvdrun).
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "launcher/hosts/check.h"
#include "launcher/hosts/preflight.h"
#include "ssh/libssh2_session.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun::ssh;
using hvdrun::launcher::preflight;
using hvdrun::launcher::PreflightReport;
using hvdrun::launcher::PreflightSettings;
using hvdrun::launcher::render_table;
using hvdrun::launcher::run_check;
using hvdrun::testing::SshdCluster;

namespace {

const std::string kVersion = "hvdrun 0.0.0-test";

// Keeps the user's agent and ~/.ssh out of the tests.
void isolate(const SshdCluster& cluster) {
  ::unsetenv("SSH_AUTH_SOCK");
  ::setenv("HOME", cluster.dir().c_str(), 1);
}

std::string stand_in(const SshdCluster& cluster, const std::string& version = kVersion) {
  return cluster.write_file("fake-hvdrun",
                            "#!/bin/sh\necho '" + version + "'\necho 'built for tests'\n", 0755);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

PreflightReport check(const SshdCluster& cluster, const hvdrun::launcher::LaunchOptions& options) {
  Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = kVersion;
  return preflight(options, connector, settings);
}

std::unique_ptr<Session> login(const SshdCluster& cluster, int k) {
  Libssh2Connector connector;
  auto config = SshConfig::load(cluster.ssh_config());
  auto target =
      resolve_target(cluster.alias(k), config, hvdrun::launcher::ssh_options(cluster.options(k)));
  return connector.connect(target, Clock::now() + std::chrono::seconds(10));
}

// A config that puts `extra` (Host blocks) before the cluster's own, so it wins.
hvdrun::launcher::LaunchOptions with_config(const SshdCluster& cluster, const std::string& extra,
                                            int hosts = 1) {
  auto options = cluster.options(hosts);
  options.ssh_config =
      cluster.write_file("custom_config", extra + read_text(cluster.ssh_config()), 0600);
  return options;
}

}  // namespace

TEST_CASE("exec channel: separate stdout and stderr, stdin, exit status and signal", "[loopback]") {
  SshdCluster cluster(2);
  isolate(cluster);
  auto session = login(cluster, 2);
  CHECK(session->peer_address() == "127.0.0.2:" + std::to_string(cluster.port()));
  CHECK(session->peer_ip() == "127.0.0.2");
  CHECK(session->local_address().rfind("127.", 0) == 0);
  CHECK(session->fd() >= 0);
  auto deadline = Clock::now() + std::chrono::seconds(10);

  auto r = run_command(*session, "echo out; echo err >&2; exit 3", deadline);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");
  CHECK(r.status.code == 3);
  CHECK(r.status.signal.empty());

  r = run_command(*session, "cat; echo done >&2", deadline, "hello\nworld\n");
  CHECK(r.out == "hello\nworld\n");
  CHECK(r.err == "done\n");
  CHECK(r.status.shell_code() == 0);

  r = run_command(*session, "kill -TERM $$", deadline);
  CHECK(r.status.signal == "TERM");
  CHECK(r.status.shell_code() == 143);

  r = run_command(*session, "head -c 3000000 /dev/zero", deadline, {}, 4 << 20);
  CHECK(r.out.size() == 3000000);  // beyond the channel window: flow control works
}

TEST_CASE("exec channel from a poll loop: non-blocking reads and writes", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  auto session = login(cluster, 1);
  auto channel = session->exec("cat", Clock::now() + std::chrono::seconds(5));
  char buf[256];
  // Nothing to read yet: must not block.
  CHECK(channel->read(Stream::out, buf, sizeof buf) == kWouldBlock);
  const std::string msg = "ping\n";
  std::size_t sent = 0;
  std::string got;
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (got != msg && Clock::now() < deadline) {
    if (sent < msg.size()) {
      auto n = channel->write(msg.data() + sent, msg.size() - sent);
      if (n != kWouldBlock) sent += static_cast<std::size_t>(n);
    }
    auto n = channel->read(Stream::out, buf, sizeof buf);
    if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    if (n == kWouldBlock) {
      pollfd pfd{session->fd(), session->poll_events(), 0};
      ::poll(&pfd, 1, 100);
    }
  }
  CHECK(got == msg);
  while (!channel->send_eof()) {
    pollfd pfd{session->fd(), session->poll_events(), 0};
    ::poll(&pfd, 1, 100);
  }
  std::optional<ExitStatus> status;
  while (!status && Clock::now() < deadline) {
    channel->read(Stream::out, buf, sizeof buf);
    channel->read(Stream::err, buf, sizeof buf);
    status = channel->exit_status();
    if (!status) {
      pollfd pfd{session->fd(), session->poll_events(), 0};
      ::poll(&pfd, 1, 100);
    }
  }
  REQUIRE(status);
  CHECK(status->code == 0);
}

TEST_CASE("a killed sshd session process fails the channel in time", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  auto session = login(cluster, 1);
  REQUIRE(cluster.kill_sessions(1) > 0);
  auto start = Clock::now();
  CHECK_THROWS_AS(run_command(*session, "true", Clock::now() + std::chrono::seconds(5)),
                  SessionError);
  CHECK(Clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("preflight ok: accept-new records the key, sessions are handed back", "[loopback]") {
  SshdCluster cluster(3);
  isolate(cluster);
  auto options = cluster.options(3);
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  INFO(render_table(report));
  REQUIRE(report.ok());
  for (int k = 1; k <= 3; ++k) {
    auto& h = report.hosts[static_cast<std::size_t>(k - 1)];
    CHECK(h.address == cluster.address(k) + ":" + std::to_string(cluster.port()));
    CHECK(h.detail.rfind(
              kVersion + " at " + options.remote_hvdrun + "; new host key ssh-ed25519 SHA256:",
              0) == 0);
    CHECK(h.latency.count() > 0);
  }
  CHECK(read_text(cluster.known_hosts()).find("[127.0.0.2]:" + std::to_string(cluster.port())) !=
        std::string::npos);
  auto session = report.take_session("node2");
  REQUIRE(session);
  auto r = run_command(*session, "echo reused", Clock::now() + std::chrono::seconds(5));
  CHECK(r.out == "reused\n");
  // Known now: a second preflight matches the recorded keys.
  auto again = check(cluster, options);
  CHECK(again.ok());
  CHECK(again.hosts[0].detail == kVersion + " at " + options.remote_hvdrun);
}

TEST_CASE("preflight refused: nothing listens on the port", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  int port = hvdrun::testing::unused_port();
  auto options = with_config(cluster, "Host node1\n  Port " + std::to_string(port) + "\n");
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  REQUIRE(report.hosts.size() == 1);
  CHECK(report.hosts[0].verdict == Verdict::refused);
  CHECK(report.hosts[0].address == "127.0.0.1:" + std::to_string(port));
  CHECK(report.hosts[0].detail.find("Connection refused") != std::string::npos);
  CHECK(report.hosts[0].fix.find("start sshd") != std::string::npos);
}

TEST_CASE("preflight not-ssh: a listener that never speaks gives up at ConnectTimeout",
          "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  hvdrun::testing::SilentListener silent;
  auto options = with_config(
      cluster, "Host node1\n  Port " + std::to_string(silent.port()) + "\n  ConnectTimeout 1\n");
  options.remote_hvdrun = stand_in(cluster);
  auto start = Clock::now();
  auto report = check(cluster, options);
  auto took = Clock::now() - start;
  CHECK(report.hosts[0].verdict == Verdict::not_ssh);
  CHECK(report.hosts[0].detail == "accepted TCP but sent no SSH banner within 1 s");
  CHECK(took >= std::chrono::milliseconds(900));
  CHECK(took < std::chrono::milliseconds(2500));
}

TEST_CASE("preflight timeout: a port that never answers the connect", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  hvdrun::testing::UnansweredListener dead;
  auto options = with_config(
      cluster, "Host node1\n  Port " + std::to_string(dead.port()) + "\n  ConnectTimeout 1\n");
  options.remote_hvdrun = stand_in(cluster);
  auto start = Clock::now();
  auto report = check(cluster, options);
  auto took = Clock::now() - start;
  CHECK(report.hosts[0].verdict == Verdict::timeout);
  CHECK(report.hosts[0].detail.find("no TCP answer within 1 s") == 0);
  CHECK(took < std::chrono::milliseconds(2500));
}

TEST_CASE("preflight dns: a name that does not resolve", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  auto options = cluster.options(0);
  options.hosts.push_back({"no-such-host.invalid", 1});
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  CHECK(report.hosts[0].verdict == Verdict::dns);
  CHECK(report.hosts[0].detail.find("'no-such-host.invalid' does not resolve") == 0);
}

TEST_CASE("preflight auth: a key that is not authorised lists keys and ssh-copy-id", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  std::string out;
  REQUIRE(hvdrun::testing::run_process(
              {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cluster.dir() + "/stranger"},
              &out) == 0);
  REQUIRE(hvdrun::testing::run_process({"ssh-keygen", "-q", "-t", "ed25519", "-N", "sekrit", "-f",
                                        cluster.dir() + "/locked"},
                                       &out) == 0);
  const std::string port = std::to_string(cluster.port());
  auto options = cluster.options(0);
  options.hosts = {{"stranger", 1}, {"locked", 1}};
  options.ssh_config = cluster.write_file(
      "auth_config", "Host stranger locked\n  HostName 127.0.0.1\n  Port " + port +
                         "\n  User root\n  UserKnownHostsFile " + cluster.known_hosts() +
                         "\nHost stranger\n  IdentityFile " + cluster.dir() + "/stranger\n" +
                         "Host locked\n  IdentityFile " + cluster.dir() + "/locked\n");
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  INFO(render_table(report));
  auto& s = report.hosts[0];
  CHECK(s.verdict == Verdict::auth);
  CHECK(s.detail.find(cluster.dir() + "/stranger (not accepted)") != std::string::npos);
  CHECK(s.fix == "ssh-copy-id -i " + cluster.dir() + "/stranger -p " + port + " root@127.0.0.1");
  auto& l = report.hosts[1];
  CHECK(l.verdict == Verdict::auth);
  CHECK(l.detail.find("passphrase-protected and no ssh-agent is running") != std::string::npos);
  CHECK(l.fix.find("ssh-add " + cluster.dir() + "/locked") != std::string::npos);
}

TEST_CASE("preflight host-key-changed: names the file:line and the ssh-keygen -R command",
          "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  const std::string name = "[127.0.0.1]:" + std::to_string(cluster.port());
  // A different ed25519 key (the user key) recorded for the host on line 2.
  std::ifstream pub(cluster.user_key() + ".pub");
  std::string other;
  std::getline(pub, other);
  cluster.write_file("known_hosts", "# recorded earlier\n" + name + " " + other + "\n", 0600);
  auto options = cluster.options(1);
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  auto& h = report.hosts[0];
  CHECK(h.verdict == Verdict::host_key_changed);
  CHECK(h.detail.find(cluster.known_hosts() + ":2") != std::string::npos);
  CHECK(h.fix.find("ssh-keygen -R '" + name + "' -f " + cluster.known_hosts()) !=
        std::string::npos);
  CHECK(h.session == nullptr);
}

TEST_CASE("preflight host-key-unknown: StrictHostKeyChecking yes with an empty known_hosts",
          "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  auto options = with_config(cluster, "Host node1\n  StrictHostKeyChecking yes\n");
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  CHECK(report.hosts[0].verdict == Verdict::host_key_unknown);
  CHECK(read_text(cluster.known_hosts()).empty());
}

TEST_CASE("preflight hvdrun-missing: absent at the path, or another version", "[loopback]") {
  SshdCluster cluster(2);
  isolate(cluster);
  auto options = cluster.options(1);
  options.remote_hvdrun = "/nonexistent/hvdrun";
  auto report = check(cluster, options);
  CHECK(report.hosts[0].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[0].detail.find("/nonexistent/hvdrun not found") == 0);
  CHECK(report.hosts[0].fix.find("--remote-hvdrun PATH") != std::string::npos);

  options.remote_hvdrun = stand_in(cluster, "hvdrun 0.0.0-other");
  report = check(cluster, options);
  CHECK(report.hosts[0].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[0].detail ==
        "found 'hvdrun 0.0.0-other' at " + options.remote_hvdrun + ", expected '" + kVersion + "'");
}

TEST_CASE("preflight ok with the real hvdrun binary", "[loopback]") {
  const std::string binary = HVDRUN_BINARY_DIR "/cli/hvdrun";
  struct stat st {};
  if (::stat(binary.c_str(), &st) != 0) {
    WARN("skipped: " << binary << " is not built");
    return;
  }
  std::string version;
  hvdrun::testing::run_process({binary, "--version"}, &version);
  version = version.substr(0, version.find('\n'));
  SshdCluster cluster(1);
  isolate(cluster);
  auto options = cluster.options(1);
  options.remote_hvdrun = binary;
  Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = version;
  auto report = preflight(options, connector, settings);
  INFO(render_table(report));
  CHECK(report.ok());
}

TEST_CASE("IPv6 addresses are tried and shown as [addr]:port", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  auto options = with_config(cluster, "Host node1\n  HostName ::1\n");
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  CHECK(report.hosts[0].verdict == Verdict::refused);  // sshd listens on 127.0.0.1 only
  CHECK(report.hosts[0].address == "[::1]:" + std::to_string(cluster.port()));
}

TEST_CASE("run_check prints one table or JSON and returns 0 or 255", "[loopback]") {
  SshdCluster cluster(2);
  isolate(cluster);
  auto options = with_config(
      cluster, "Host node2\n  Port " + std::to_string(hvdrun::testing::unused_port()) + "\n", 2);
  options.remote_hvdrun = stand_in(cluster);
  options.hosts.insert(options.hosts.begin(), {"localhost", 2});
  std::ostringstream captured;
  auto* old = std::cout.rdbuf(captured.rdbuf());
  int rc = run_check(options, kVersion);
  options.json = true;
  int rc_json = run_check(options, kVersion);
  options.hosts.pop_back();
  int rc_ok = run_check(options, kVersion);
  std::cout.rdbuf(old);
  CHECK(rc == 255);
  CHECK(rc_json == 255);
  CHECK(rc_ok == 0);
  auto text = captured.str();
  INFO(text);
  CHECK(text.find("HOST") == 0);
  CHECK(text.find("node1") != std::string::npos);
  CHECK(text.find("refused") != std::string::npos);
  CHECK(text.find("{\"ok\": false") != std::string::npos);
  CHECK(text.find("{\"ok\": true") != std::string::npos);
}

TEST_CASE("ssh-agent keys come first, passphrase-protected ones included", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  std::string out;
  // An authorised key with a passphrase: only usable through the agent.
  REQUIRE(hvdrun::testing::run_process({"ssh-keygen", "-q", "-t", "ed25519", "-N", "sekrit", "-f",
                                        cluster.dir() + "/locked"},
                                       &out) == 0);
  {
    std::ofstream keys(cluster.dir() + "/authorized_keys", std::ios::app);
    keys << read_text(cluster.dir() + "/locked.pub");
  }
  hvdrun::testing::SshAgent agent(cluster.dir());
  agent.add(cluster.dir() + "/locked", "sekrit");
  ::setenv("SSH_AUTH_SOCK", agent.socket().c_str(), 1);
  const std::string port = std::to_string(cluster.port());
  const std::string common = "  HostName 127.0.0.1\n  Port " + port +
                             "\n  User root\n  UserKnownHostsFile " + cluster.known_hosts() + "\n";
  REQUIRE(hvdrun::testing::run_process(
              {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", cluster.dir() + "/stranger"},
              &out) == 0);
  auto options = cluster.options(0);
  options.hosts = {{"via-agent", 1}, {"only-stranger", 1}};
  options.ssh_config = cluster.write_file(
      "agent_config", "Host via-agent\n" + common + "  IdentityFile " + cluster.dir() +
                          "/locked\nHost only-stranger\n" + common + "  IdentityFile " +
                          cluster.dir() + "/stranger\n  IdentitiesOnly yes\n");
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  ::unsetenv("SSH_AUTH_SOCK");
  INFO(render_table(report));
  CHECK(report.hosts[0].verdict == Verdict::ok);
  // IdentitiesOnly: the agent's (authorised) key does not match the configured file.
  CHECK(report.hosts[1].verdict == Verdict::auth);
  CHECK(report.hosts[1].detail.find("agent key") == std::string::npos);
  CHECK(report.hosts[1].detail.find("stranger (not accepted)") != std::string::npos);
}

TEST_CASE("preflight not-ssh: a server that answers something else is named", "[loopback]") {
  SshdCluster cluster(1);
  isolate(cluster);
  hvdrun::testing::SilentListener web;  // accepted by hand below, once
  std::thread server([&] {
    pollfd pfd{web.fd(), POLLIN, 0};
    if (::poll(&pfd, 1, 5000) != 1) return;
    hvdrun::UniqueFd conn(::accept(web.fd(), nullptr, nullptr));
    const char reply[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ::send(conn.get(), reply, sizeof reply - 1, MSG_NOSIGNAL);
    ::poll(&pfd, 0, 200);  // let the client read before the close
  });
  auto options = with_config(cluster, "Host node1\n  Port " + std::to_string(web.port()) + "\n");
  options.remote_hvdrun = stand_in(cluster);
  auto report = check(cluster, options);
  server.join();
  CHECK(report.hosts[0].verdict == Verdict::not_ssh);
  CHECK(report.hosts[0].detail == "answered 'HTTP/1.1 400 Bad Request' instead of an SSH banner");
}

TEST_CASE("preflight that starts the agent: one shell, the agent's channel handed back",
          "[loopback]") {
  SshdCluster cluster(2);
  isolate(cluster);
  // A stand-in whose "agent" echoes its input: what comes back went through the handed
  // over channel, to the very process the version check's shell exec'd.
  const std::string echo_agent = cluster.write_file(
      "echo-agent",
      "#!/bin/sh\nif [ \"$1\" = agent ]; then exec cat; fi\necho '" + kVersion + "'\n", 0755);
  auto options = cluster.options(2);
  options.remote_hvdrun = echo_agent;
  Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = kVersion;
  settings.start_agent = true;
  auto report = preflight(options, connector, settings);
  REQUIRE(report.ok());
  for (auto& host : report.hosts) {
    INFO(host.host);
    REQUIRE(host.session);
    REQUIRE(host.agent_channel);
    CHECK(host.detail.find(kVersion + " at " + echo_agent) == 0);
    const std::string ping = "ping " + host.host + "\n";
    std::size_t sent = 0;
    std::string got;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    char buf[256];
    while (got.size() < ping.size()) {
      REQUIRE(Clock::now() < deadline);
      if (sent < ping.size()) {
        auto n = host.agent_channel->write(ping.data() + sent, ping.size() - sent);
        if (n > 0) sent += static_cast<std::size_t>(n);
      }
      auto n = host.agent_channel->read(Stream::out, buf, sizeof buf);
      if (n > 0) {
        got.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      REQUIRE(n == kWouldBlock);
      pollfd p{host.session->fd(), host.session->poll_events(), 0};
      ::poll(&p, 1, 50);
    }
    CHECK(got == ping);  // nothing of the version check's output is left in the stream
  }

  // The verdicts of bad hosts are those of the plain check.
  options = cluster.options(1);
  options.remote_hvdrun = "/nonexistent/hvdrun";
  report = preflight(options, connector, settings);
  CHECK(report.hosts[0].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[0].detail.find("/nonexistent/hvdrun not found") == 0);
  CHECK_FALSE(report.hosts[0].agent_channel);
  options.remote_hvdrun = stand_in(cluster, "hvdrun 0.0.0-other");
  report = preflight(options, connector, settings);
  CHECK(report.hosts[0].verdict == Verdict::hvdrun_missing);
  CHECK(report.hosts[0].detail ==
        "found 'hvdrun 0.0.0-other' at " + options.remote_hvdrun + ", expected '" + kVersion + "'");
  CHECK_FALSE(report.hosts[0].agent_channel);
}
