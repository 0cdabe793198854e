// ssh_config subset: patterns, negation, first-value-wins, IdentityFile accumulation,
// malformed lines with file:line, and resolution into a Target with -p/-i overrides.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ssh/config.h"

using hvdrun::UsageError;
using hvdrun::ssh::SshConfig;
using hvdrun::ssh::StrictHostKeyChecking;

TEST_CASE("glob patterns match like OpenSSH", "[config]") {
  using hvdrun::ssh::glob_match;
  CHECK(glob_match("*", "anything"));
  CHECK(glob_match("node?", "node1"));
  CHECK_FALSE(glob_match("node?", "node12"));
  CHECK(glob_match("*.example.com", "gpu1.example.com"));
  CHECK_FALSE(glob_match("*.example.com", "example.com"));
  CHECK(glob_match("NODE*", "node7"));
  CHECK(glob_match("a*b*c", "aXXbYYc"));
  CHECK_FALSE(glob_match("a*b*c", "aXXbYY"));
  CHECK(glob_match("", ""));
}

TEST_CASE("negated patterns exclude hosts", "[config]") {
  using hvdrun::ssh::host_matches;
  CHECK(host_matches("node1", {"node*", "!node2"}));
  CHECK_FALSE(host_matches("node2", {"node*", "!node2"}));
  CHECK_FALSE(host_matches("node2", {"!node2", "node*"}));
  CHECK_FALSE(host_matches("other", {"!node2"}));  // a negation alone matches nothing
}

TEST_CASE("first value wins across matching blocks, IdentityFile accumulates", "[config]") {
  auto config = SshConfig::parse(
      "# comment\n"
      "Host node1 node2\n"
      "  HostName 10.0.0.1\n"
      "  Port 2222\n"
      "  IdentityFile ~/.ssh/first\n"
      "Host node*\n"
      "  Port 3333\n"
      "  User alice\n"
      "  IdentityFile ~/.ssh/second\n"
      "Host *\n"
      "  User bob\n"
      "  StrictHostKeyChecking yes\n"
      "  ConnectTimeout 4\n",
      "cfg");
  auto n1 = config.lookup("node1");
  CHECK(n1.hostname == "10.0.0.1");
  CHECK(n1.port == 2222);
  CHECK(n1.user == "alice");
  CHECK(n1.identity_files == std::vector<std::string>{"~/.ssh/first", "~/.ssh/second"});
  CHECK(n1.strict == StrictHostKeyChecking::yes);
  CHECK(n1.connect_timeout_s == 4);
  auto n3 = config.lookup("node3");
  CHECK_FALSE(n3.hostname);
  CHECK(n3.port == 3333);
  auto other = config.lookup("gpu");
  CHECK(other.user == "bob");
  CHECK_FALSE(other.port);
}

TEST_CASE("keywords are case-insensitive and take Key=value forms", "[config]") {
  auto config = SshConfig::parse(
      "HOST=gpu*\n"
      "  hostname=10.1.1.1\n"
      "  PORT = 2200\n"
      "  identityfile \"/keys/with space\"\n"
      "  stricthostkeychecking accept-new\n"
      "  SomeUnknownOption whatever you like\n"
      "  ForwardAgent yes # trailing comment\n",
      "cfg");
  auto g = config.lookup("GPU7");
  CHECK(g.hostname == "10.1.1.1");
  CHECK(g.port == 2200);
  CHECK(g.identity_files == std::vector<std::string>{"/keys/with space"});
  CHECK(g.strict == StrictHostKeyChecking::accept_new);
}

TEST_CASE("settings before any Host apply to every host, Match blocks are skipped", "[config]") {
  auto config = SshConfig::parse(
      "User early\n"
      "Match host foo\n"
      "  Port 1\n"
      "Host *\n"
      "  User late\n"
      "  Port 2\n",
      "cfg");
  auto h = config.lookup("foo");
  CHECK(h.user == "early");
  CHECK(h.port == 2);
}

TEST_CASE("malformed lines are usage errors with file:line", "[config]") {
  auto error_of = [](const std::string& text) {
    try {
      SshConfig::parse(text, "/etc/my_config");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("Host a\n  Port\n") == "/etc/my_config:2: missing value for 'Port'");
  CHECK(error_of("Host a\n\n  Port 70000\n") ==
        "/etc/my_config:3: Port must be a number from 1 to 65535, not '70000'");
  CHECK(error_of("Port abc\n") ==
        "/etc/my_config:1: Port must be a number from 1 to 65535, not 'abc'");
  CHECK(error_of("StrictHostKeyChecking maybe\n") ==
        "/etc/my_config:1: StrictHostKeyChecking must be yes, accept-new, no or ask, not 'maybe'");
  CHECK(error_of("ConnectTimeout soon\n") ==
        "/etc/my_config:1: ConnectTimeout must be a number of seconds, not 'soon'");
  CHECK(error_of("Host\n") == "/etc/my_config:1: missing value for 'Host'");
  CHECK(error_of("IdentityFile \"/unterminated\n") == "/etc/my_config:1: unbalanced quote");
  CHECK(error_of("Port 22 23\n") == "/etc/my_config:1: unexpected '23' after the value of port");
  CHECK(error_of("=value\n") == "/etc/my_config:1: missing keyword before '='");
}

TEST_CASE("an unreadable --ssh-config is a usage error naming it", "[config]") {
  CHECK_THROWS_WITH(SshConfig::load("/nonexistent/ssh_config"),
                    "ssh config '/nonexistent/ssh_config': cannot read it (No such file or "
                    "directory); check --ssh-config");
  CHECK_THROWS_WITH(SshConfig::load("/"),
                    "ssh config '/': cannot read it (Is a directory); check --ssh-config");
}

TEST_CASE("an ssh_config others could change is refused, as OpenSSH refuses it",
          "[config][security]") {
  char tmpl[] = "/tmp/hvdrun-config-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  const std::string text = "Host a\n  HostName 127.0.0.9\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  const std::string path = tmpl;
  CHECK_NOTHROW(SshConfig::load(path));
  REQUIRE(::chmod(tmpl, 0664) == 0);
  CHECK_THROWS_WITH(SshConfig::load(path),
                    "ssh config '" + path +
                        "': is writable by other users, who could send your connections "
                        "elsewhere (chmod go-w it); check --ssh-config");
  REQUIRE(::chmod(tmpl, 0644) == 0);
  if (::geteuid() == 0) {
    REQUIRE(::chown(tmpl, 65534, 65534) == 0);
    CHECK_THROWS_WITH(SshConfig::load(path),
                      Catch::Contains("belongs to another user, nobody (uid 65534)"));
  }
  ::unlink(tmpl);
}

TEST_CASE("an ssh_config or an Include without end stops at its size cap", "[config]") {
  CHECK_THROWS_WITH(SshConfig::load("/dev/zero"),
                    "ssh config '/dev/zero': larger than 1 MiB, not an ssh_config file; check "
                    "--ssh-config");
  char tmpl[] = "/tmp/hvdrun-config-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  const std::string text = "Host a\n  Port 2222\nInclude /dev/zero\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  CHECK_THROWS_WITH(SshConfig::load(tmpl),
                    std::string(tmpl) +
                        ":3: included file '/dev/zero': larger than 1 MiB, not "
                        "an ssh_config file; Include only ssh_config files");
  ::unlink(tmpl);
}

TEST_CASE("resolve_target applies defaults, expansion and -p/-i overrides", "[config]") {
  ::setenv("HOME", "/home/tester", 1);
  ::unsetenv("SSH_AUTH_SOCK");
  auto config = SshConfig::parse(
      "Host node1\n"
      "  HostName %h.cluster\n"
      "  Port 2222\n"
      "  User root\n"
      "  IdentityFile ~/.ssh/cluster_key\n"
      "  UserKnownHostsFile ~/.ssh/kh_%h other\n"
      "  ConnectTimeout 60\n",
      "cfg");
  hvdrun::ssh::SshOptions options;
  options.start_timeout_s = 30;
  auto t = hvdrun::ssh::resolve_target("node1", config, options);
  CHECK(t.alias == "node1");
  CHECK(t.hostname == "node1.cluster");
  CHECK(t.port == 2222);
  CHECK(t.user == "root");
  CHECK(t.identity_files == std::vector<std::string>{"/home/tester/.ssh/cluster_key"});
  CHECK(t.default_identity_files == std::vector<std::string>{"/home/tester/.ssh/id_ed25519",
                                                             "/home/tester/.ssh/id_ecdsa",
                                                             "/home/tester/.ssh/id_rsa"});
  CHECK(t.known_hosts_file == "/home/tester/.ssh/kh_node1.cluster");
  CHECK(t.connect_timeout == std::chrono::seconds(30));  // capped by --start-timeout
  CHECK(t.agent_socket.empty());

  options.port = 2022;
  options.identity_file = "~/.ssh/from_flag";
  ::setenv("SSH_AUTH_SOCK", "/tmp/agent.sock", 1);
  t = hvdrun::ssh::resolve_target("node1", config, options);
  CHECK(t.port == 2022);
  CHECK(t.identity_files ==
        std::vector<std::string>{"/home/tester/.ssh/from_flag", "/home/tester/.ssh/cluster_key"});
  CHECK(t.agent_socket == "/tmp/agent.sock");
  ::unsetenv("SSH_AUTH_SOCK");

  auto plain = hvdrun::ssh::resolve_target("gpu3", SshConfig{}, hvdrun::ssh::SshOptions{});
  CHECK(plain.hostname == "gpu3");
  CHECK(plain.port == 22);
  CHECK(plain.known_hosts_file == "/home/tester/.ssh/known_hosts");
  CHECK(plain.strict == StrictHostKeyChecking::accept_new);
  CHECK(plain.connect_timeout == std::chrono::seconds(10));
}

TEST_CASE("Include reads files (globs, relative to ~/.ssh), conditionally inside Host",
          "[config]") {
  char tmpl[] = "/tmp/hvdrun-cfg-XXXXXX";
  const std::string home = ::mkdtemp(tmpl);
  ::setenv("HOME", home.c_str(), 1);
  std::filesystem::create_directories(home + "/.ssh/config.d");
  std::ofstream(home + "/.ssh/config.d/a.conf") << "Host gpu*\n  Port 2201\n";
  std::ofstream(home + "/.ssh/config.d/b.conf") << "Host cpu*\n  Port 2202\n";
  std::ofstream(home + "/.ssh/lab.conf") << "User labuser\n";
  auto config = SshConfig::parse(
      "Include config.d/*.conf\n"
      "Host lab*\n"
      "  Include lab.conf\n"
      "  Port 2203\n"
      "Host *\n"
      "  User someone\n",
      "cfg");
  CHECK(config.lookup("gpu1").port == 2201);
  CHECK(config.lookup("cpu1").port == 2202);
  CHECK(config.lookup("lab1").user == "labuser");
  CHECK(config.lookup("lab1").port == 2203);
  CHECK(config.lookup("gpu1").user == "someone");  // lab.conf applies to lab* only
  std::ofstream(home + "/.ssh/bad.conf") << "Port x\n";
  CHECK_THROWS_WITH(SshConfig::parse("Include bad.conf\n", "cfg"),
                    home + "/.ssh/bad.conf:1: Port must be a number from 1 to 65535, not 'x'");
  std::ofstream(home + "/.ssh/loop.conf") << "Include loop.conf\n";
  CHECK_THROWS_WITH(SshConfig::parse("Include loop.conf\n", "cfg"),
                    Catch::Contains("Include nested too deeply"));
  std::filesystem::remove_all(home);
}

TEST_CASE("IdentitiesOnly drops the default keys and is validated", "[config]") {
  ::setenv("HOME", "/home/tester", 1);
  auto config = SshConfig::parse("Host a\n  IdentityFile ~/k\n  IdentitiesOnly yes\n", "cfg");
  auto t = hvdrun::ssh::resolve_target("a", config, hvdrun::ssh::SshOptions{});
  CHECK(t.identities_only);
  CHECK(t.identity_files == std::vector<std::string>{"/home/tester/k"});
  CHECK(t.default_identity_files.empty());
  CHECK_THROWS_WITH(SshConfig::parse("IdentitiesOnly maybe\n", "cfg"),
                    "cfg:1: IdentitiesOnly must be yes or no, not 'maybe'");
}

TEST_CASE("ProxyJump becomes a chain of jump targets, ProxyCommand is kept to be refused",
          "[config]") {
  auto config = SshConfig::parse(
      "Host a\n  ProxyCommand ssh -W \"%h:%p\" bastion\n"
      "Host b\n  ProxyJump none\n"
      "Host b c\n  ProxyJump jump1,admin@jump2:2222\n"
      "Host jump1\n  HostName 10.0.0.1\n  Port 2200\n"
      "Host loop\n  ProxyJump loop\n",
      "cfg");
  CHECK(config.lookup("a").proxy == "ProxyCommand ssh -W %h:%p bastion");
  CHECK(config.lookup("b").proxy == "");
  CHECK(config.lookup("c").proxy == "ProxyJump jump1,admin@jump2:2222");
  CHECK_FALSE(config.lookup("d").proxy);
  hvdrun::ssh::SshOptions o;
  o.port = 2022;  // -p is for the job's hosts, not for jump hosts
  CHECK(resolve_target("a", config, o).proxy == "ProxyCommand ssh -W %h:%p bastion");
  CHECK_FALSE(resolve_target("b", config, o).jump);
  const auto c = resolve_target("c", config, o);
  CHECK(c.proxy.empty());
  CHECK(c.port == 2022);
  REQUIRE(c.jump);
  CHECK(c.jump->alias == "jump2");
  CHECK(c.jump->user == "admin");
  CHECK(c.jump->port == 2222);
  REQUIRE(c.jump->jump);
  CHECK(c.jump->jump->alias == "jump1");
  CHECK(c.jump->jump->hostname == "10.0.0.1");
  CHECK(c.jump->jump->port == 2200);
  CHECK_FALSE(c.jump->jump->jump);
  CHECK_THROWS_WITH(resolve_target("loop", config, o), Catch::Contains("more than 8 jumps"));
}
