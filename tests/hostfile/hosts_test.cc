// Table-driven tests of the `-H` and hostfile parsers: horovodrun's documented forms,
// IPv6, whitespace and CRLF tolerance, and the exact message for each malformed input.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "hostfile/hosts.h"

using hvdrun::UsageError;
using hvdrun::hostfile::HostSlots;
using hvdrun::hostfile::parse_host_list;
using hvdrun::hostfile::parse_hostfile;
using hvdrun::hostfile::parse_hostfile_text;

namespace {

using Hosts = std::vector<HostSlots>;

std::string error_of_list(const std::string& text) {
  try {
    parse_host_list(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string error_of_file(const std::string& text) {
  try {
    parse_hostfile_text(text, "hosts.txt");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("host list (-H) accepts horovodrun's forms") {
  struct Case {
    std::string text;
    Hosts want;
  };
  const std::vector<Case> cases = {
      {"localhost:4", {{"localhost", 4}}},
      {"server1:4,server2:4", {{"server1", 4}, {"server2", 4}}},
      {"server1:1,server2:1,server3:1,server4:1",
       {{"server1", 1}, {"server2", 1}, {"server3", 1}, {"server4", 1}}},
      {"node1", {{"node1", 1}}},
      {"node1,node2:3", {{"node1", 1}, {"node2", 3}}},
      {"node1 , node2:2 ,node3", {{"node1", 1}, {"node2", 2}, {"node3", 1}}},
      {"  node1:2  ", {{"node1", 2}}},
      {"10.0.0.1:8,10.0.0.2:8", {{"10.0.0.1", 8}, {"10.0.0.2", 8}}},
      {"[::1]", {{"::1", 1}}},
      {"[::1]:4", {{"::1", 4}}},
      {"[fe80::1%eth0]:2,[2001:db8::7]", {{"fe80::1%eth0", 2}, {"2001:db8::7", 1}}},
      {"[::ffff:10.0.0.1]:2", {{"::ffff:10.0.0.1", 2}}},
      {"gpu-node_7.cluster.local:04", {{"gpu-node_7.cluster.local", 4}}},
      {"node1:65536", {{"node1", 65536}}},
  };
  for (const auto& c : cases) {
    INFO("input: " << c.text);
    CHECK(parse_host_list(c.text) == c.want);
  }
}

TEST_CASE("a host's slots may be auto: one per GPU, counted at the launch") {
  const Hosts h = parse_host_list("node1:auto,node2:2,[fe80::1]:auto");
  REQUIRE(h.size() == 3);
  CHECK(h[0].auto_slots);
  CHECK(h[0].slots == 1);
  CHECK_FALSE(h[1].auto_slots);
  CHECK(h[2].name == "fe80::1");
  CHECK(h[2].auto_slots);
  const Hosts f = parse_hostfile_text("a slots=auto gpus=0,1\nb:auto\nc slots=3\n", "hf");
  REQUIRE(f.size() == 3);
  CHECK(f[0].auto_slots);
  CHECK(f[0].gpus == std::vector<std::string>{"0", "1"});
  CHECK(f[1].auto_slots);
  CHECK_FALSE(f[2].auto_slots);
  CHECK_THROWS_WITH(parse_host_list("node1:Auto"),
                    "-H: bad slot count 'Auto' for host 'node1'; expected a whole number from 1 "
                    "to 65536, as in node1:4");
}

TEST_CASE("host list (-H) rejects malformed lists with a precise message") {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"",
       "-H: empty host list; expected host[:slots][,host[:slots]...], as in -H node1:4,node2:4"},
      {"  ",
       "-H: empty host list; expected host[:slots][,host[:slots]...], as in -H node1:4,node2:4"},
      {"a,,b",
       "-H: empty entry 2 in 'a,,b'; expected host[:slots][,host[:slots]...] with no empty items "
       "between commas"},
      {"a,b,",
       "-H: empty entry 3 in 'a,b,'; expected host[:slots][,host[:slots]...] with no empty items "
       "between commas"},
      {",a",
       "-H: empty entry 1 in ',a'; expected host[:slots][,host[:slots]...] with no empty items "
       "between commas"},
      {"node1:4x",
       "-H: bad slot count '4x' for host 'node1'; expected a whole number from 1 to 65536, as in "
       "node1:4"},
      {"node1:0",
       "-H: bad slot count '0' for host 'node1'; expected a whole number from 1 to 65536, as in "
       "node1:4"},
      {"node1:-1",
       "-H: bad slot count '-1' for host 'node1'; expected a whole number from 1 to 65536, as in "
       "node1:4"},
      {"node1:",
       "-H: bad slot count '' for host 'node1'; expected a whole number from 1 to 65536, as in "
       "node1:4"},
      {"node1:99999999999999999999",
       "-H: bad slot count '99999999999999999999' for host 'node1'; expected a whole number from 1 "
       "to 65536, as in node1:4"},
      {"[::1]:x",
       "-H: bad slot count 'x' for host '::1'; expected a whole number from 1 to 65536, as in "
       "[::1]:4"},
      {"fe80::1",
       "-H: 'fe80::1' looks like an IPv6 address; write it in brackets, as in [fe80::1] or "
       "[fe80::1]:slots"},
      {"node1:2:3",
       "-H: 'node1:2:3' has more than one ':'; expected host:slots, or [address]:slots for an "
       "IPv6 address"},
      {"::1:4",
       "-H: '::1:4' looks like an IPv6 address; write it in brackets, as in [::1:4] or "
       "[::1:4]:slots"},
      {"a:1,b:2,a:3",
       "-H: host 'a' is listed twice (entries 1 and 3); list each host once with its total slots, "
       "as in a:4"},
      {"Node1,node1",
       "-H: host 'node1' is listed twice (entries 1 and 2); list each host once with its total "
       "slots, as in node1:2"},
      {"[::1", "-H: '[::1' has no closing ']'; expected [ipv6] or [ipv6]:slots"},
      {"[::1]4", "-H: unexpected '4' after ']' in '[::1]4'; expected [ipv6] or [ipv6]:slots"},
      {"[]", "-H: empty IPv6 address in '[]'; expected [address] or [address]:slots"},
      {"[node1]:2",
       "-H: bad IPv6 address 'node1': 'n' is not allowed; expected hex digits and ':' inside "
       "[...], as in [fe80::1]:2"},
      {"[10.0.0.1]",
       "-H: bad IPv6 address '10.0.0.1' inside [...]; brackets are for IPv6 addresses, write "
       "other hosts without them"},
      {"node 1",
       "-H: host name 'node 1' contains ' '; host names may contain letters, digits, '.', '-' "
       "and '_'"},
      {"root@node1",
       "-H: user names are not accepted in host 'root@node1'; set 'User' for that host in the "
       "ssh config (--ssh-config) instead"},
      {"-oProxyCommand=x",
       "-H: host name '-oProxyCommand=x' starts with '-'; expected a host name or address"},
      {":4", "-H: empty host name; expected host or host:slots"},
      {"a\tb",
       "-H: host name 'a\\tb' contains '\\t'; host names may contain letters, digits, '.', '-' and "
       "'_'"},
      {std::string("a\0b", 3),
       "-H: host name 'a\\x00b' contains '\\x00'; host names may contain letters, digits, '.', '-' "
       "and '_'"},
      // A UTF-8 name is shown whole; a byte that is not UTF-8 as \xNN, never half a character.
      {"nod\xc3\xa9:1",
       "-H: host name 'nod\xc3\xa9' contains '\xc3\xa9', which is not ASCII; host names may "
       "contain ASCII letters, digits, '.', '-' and '_' (write an internationalised name in its "
       "ASCII form, xn--...)"},
      {"\xe6\x9d\xb1\xe4\xba\xac",
       "-H: host name '\xe6\x9d\xb1\xe4\xba\xac' contains '\xe6\x9d\xb1', which is not ASCII; "
       "host names may contain ASCII letters, digits, '.', '-' and '_' (write an "
       "internationalised name in its ASCII form, xn--...)"},
      {"nod\xc3",
       "-H: host name 'nod\\xc3' contains '\\xc3', which is not ASCII; host names may contain "
       "ASCII letters, digits, '.', '-' and '_' (write an internationalised name in its ASCII "
       "form, xn--...)"},
  };
  for (const auto& c : cases) {
    INFO("input: " << c.text);
    CHECK(error_of_list(c.text) == c.message);
  }
}

TEST_CASE("host list (-H) rejects more inputs without crashing") {
  for (std::string text :
       {"a:1:2", "a:+1", "a: 1", "a :1", "a:1.5", "a:0x4", "a;b", "a b,c", "[::1]]", "[[::1]]",
        "[::1]:", "[::1%]", "[::1%e th]", "a=b", "a:65537", "a:1e3", "\xff", "a#b"}) {
    INFO("input: " << text);
    CHECK_THROWS_AS(parse_host_list(text), UsageError);
  }
}

TEST_CASE("hostfile accepts horovodrun's and mpirun's forms") {
  struct Case {
    std::string text;
    Hosts want;
  };
  const std::vector<Case> cases = {
      {"server1 slots=4\nserver2 slots=4\n", {{"server1", 4}, {"server2", 4}}},
      {"server1:4\nserver2:4", {{"server1", 4}, {"server2", 4}}},
      {"server1\nserver2\n", {{"server1", 1}, {"server2", 1}}},
      {"# cluster\n\nserver1 slots=2 # two GPUs\n\n  server2   slots=1\n",
       {{"server1", 2}, {"server2", 1}}},
      {"server1 slots=4\r\nserver2 slots=2\r\n", {{"server1", 4}, {"server2", 2}}},
      {"server1 slots = 3\n", {{"server1", 3}}},
      {"server1\tslots=3\t\n", {{"server1", 3}}},
      {"server1 slots=4 max_slots=8\n", {{"server1", 4}}},
      {"server1 max_slots=8 slots=2\n", {{"server1", 2}}},
      {"[::1] slots=2\n[fe80::2]:3\n", {{"::1", 2}, {"fe80::2", 3}}},
      {"\xEF\xBB\xBFserver1 slots=2\n", {{"server1", 2}}},
      {"server1#comment right after\n", {{"server1", 1}}},
  };
  for (const auto& c : cases) {
    INFO("input: " << c.text);
    CHECK(parse_hostfile_text(c.text, "hosts.txt") == c.want);
  }
}

TEST_CASE("hostfile errors name file:line, quote the text and say what is expected") {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"",
       "hosts.txt: no hosts in the hostfile; expected one host per line as 'host slots=N', "
       "'host:N' or 'host'"},
      {"# only comments\n\n   \n",
       "hosts.txt: no hosts in the hostfile; expected one host per line as 'host slots=N', "
       "'host:N' or 'host'"},
      {"a slots=2\nb slots=4x\n",
       "hosts.txt:2: bad slot count '4x' for host 'b'; expected a whole number from 1 to 65536, "
       "as in b slots=4"},
      {"a slots=0\n",
       "hosts.txt:1: bad slot count '0' for host 'a'; expected a whole number from 1 to 65536, as "
       "in a slots=4"},
      {"a slots=\n",
       "hosts.txt:1: bad slot count '' for host 'a'; expected a whole number from 1 to 65536, as "
       "in a slots=4"},
      {"\n\na:x\n",
       "hosts.txt:3: bad slot count 'x' for host 'a'; expected a whole number from 1 to 65536, as "
       "in a:4"},
      {"a slots=2\nb\na slots=1\n",
       "hosts.txt:3: host 'a' is already listed at line 1; list each host once with its total "
       "slots"},
      {"a:2 slots=2\n",
       "hosts.txt:1: slot count given twice in 'a:2 slots=2'; expected either 'host slots=N' or "
       "'host:N'"},
      {"a slots=1 slots=2\n",
       "hosts.txt:1: slot count given twice in 'a slots=1 slots=2'; expected either 'host "
       "slots=N' or 'host:N'"},
      {"a 4\n",
       "hosts.txt:1: unexpected '4' in 'a 4'; expected 'host slots=N', 'host:N' or 'host'"},
      {"a b\n",
       "hosts.txt:1: unexpected 'b' in 'a b'; expected 'host slots=N', 'host:N' or 'host'"},
      {"a slots\n",
       "hosts.txt:1: unexpected 'slots' in 'a slots'; expected 'host slots=N', 'host:N' or "
       "'host'"},
      {"a =4\n",
       "hosts.txt:1: unexpected '=4' in 'a =4'; expected 'host slots=N', 'host:N' or 'host'"},
      {"a cpus=4\n",
       "hosts.txt:1: unknown attribute 'cpus' in 'a cpus=4'; expected 'host slots=N', 'host:N' or "
       "'host', with gpus=ID,... (max_slots=N is accepted and ignored)"},
      {"a max_slots=x\n",
       "hosts.txt:1: bad max_slots 'x' for host 'a'; expected a whole number from 1 to 65536"},
      {"slots=4\n",
       "hosts.txt:1: line 'slots=4' starts with 'slots=4' instead of a host; expected 'host "
       "slots=N', 'host:N' or 'host'"},
      {"a,b\n",
       "hosts.txt:1: 'a,b' holds several hosts; expected one host per line as 'host slots=N', "
       "'host:N' or 'host'"},
      {"fe80::1 slots=2\n",
       "hosts.txt:1: 'fe80::1' looks like an IPv6 address; write it in brackets, as in [fe80::1] "
       "or [fe80::1]:slots"},
      {"ok\nbad\x01name\n",
       "hosts.txt:2: host name 'bad\\x01name' contains '\\x01'; host names may contain letters, "
       "digits, '.', '-' and '_'"},
  };
  for (const auto& c : cases) {
    INFO("input: " << c.text);
    CHECK(error_of_file(c.text) == c.message);
  }
}

TEST_CASE("hostfile is read from disk, unreadable paths are usage errors") {
  char path[] = "/tmp/hvdrun-hostfile-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << "node1 slots=2\nnode2:3\n";
  }
  CHECK(parse_hostfile(path) == Hosts{{"node1", 2}, {"node2", 3}});
  {
    std::ofstream out(path);
    out << "node1 slots=2\nnode2:3x\n";
  }
  CHECK_THROWS_WITH(parse_hostfile(path),
                    std::string(path) +
                        ":2: bad slot count '3x' for host 'node2'; expected a whole number from 1 "
                        "to 65536, as in node2:4");
  std::remove(path);
  CHECK_THROWS_WITH(parse_hostfile(path),
                    "--hostfile '" + std::string(path) +
                        "': cannot open: No such file or directory; expected a readable file "
                        "with one host per line");
  CHECK_THROWS_WITH(parse_hostfile("/tmp"),
                    "--hostfile '/tmp': a directory, not a regular file; expected a readable "
                    "file with one host per line");
}

TEST_CASE("a hostfile that is a FIFO or a device is refused at once, never read") {
  char dir[] = "/tmp/hvdrun-hostfile-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string fifo = std::string(dir) + "/hosts";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // No writer ever opens it: an open() or read() of it would wait for ever.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(parse_hostfile(fifo), "--hostfile '" + fifo +
                                              "': a FIFO, not a regular file; expected a "
                                              "readable file with one host per line");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  // /dev/zero would be read without end.
  CHECK_THROWS_WITH(parse_hostfile("/dev/zero"),
                    "--hostfile '/dev/zero': a character device, not a regular file; expected a "
                    "readable file with one host per line");
  ::unlink(fifo.c_str());
  ::rmdir(dir);
}
