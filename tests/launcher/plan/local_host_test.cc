// Which hosts are this machine (only literal names and addresses, never a resolution), its
// interfaces and routes, and the free-port probe.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "launcher/plan/local_host.h"

using hvdrun::UniqueFd;
using hvdrun::launcher::interface_address;
using hvdrun::launcher::interface_addresses;
using hvdrun::launcher::interface_for_address;
using hvdrun::launcher::interface_toward;
using hvdrun::launcher::is_local_host;
using hvdrun::launcher::local_address_toward;
using hvdrun::launcher::pick_free_port;

TEST_CASE("localhost and this machine's own names and addresses are local") {
  CHECK(is_local_host("localhost"));
  CHECK(is_local_host("127.0.0.1"));
  CHECK(is_local_host("::1"));
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  CHECK(is_local_host(name));
}

TEST_CASE("other loopback addresses and aliases stay remote") {
  CHECK_FALSE(is_local_host("127.0.0.2"));  // the loopback test cluster's node addresses
  CHECK_FALSE(is_local_host("node1"));
  CHECK_FALSE(is_local_host("10.255.255.254"));
}

TEST_CASE("interface addresses are looked up by name with a helpful error") {
  CHECK(interface_address("lo") == "127.0.0.1");
  try {
    interface_address("nosuchif0");
    FAIL("no error");
  } catch (const hvdrun::UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no such interface") && Catch::Contains("lo"));
  }
}

TEST_CASE("an interface's addresses are its own, not its networks") {
  // What each host adds to the Horovod rendezvous's allow-list with --network-interface lo.
  auto addrs = interface_addresses("lo");
  CHECK(std::find(addrs.begin(), addrs.end(), "127.0.0.1") != addrs.end());
  for (const auto& a : addrs) CHECK(a.find('/') == std::string::npos);
  CHECK(interface_addresses("nosuchif0").empty());
}

TEST_CASE("names are compared without case and localhost.localdomain counts") {
  CHECK(is_local_host("LOCALHOST"));
  CHECK(is_local_host("localhost.localdomain"));
  CHECK(is_local_host("0:0::1"));
}

TEST_CASE("pick_free_port returns a port that can be bound right away") {
  auto port = pick_free_port();
  REQUIRE(port > 0);
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  CHECK(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  CHECK(pick_free_port() != port);  // ours is held now
}

TEST_CASE("interface_for_address finds the interface owning an address or its subnet") {
  CHECK(interface_for_address("127.0.0.1") == "lo");
  CHECK(interface_for_address("127.0.0.7") == "lo");  // loopback /8, as the test cluster uses
  CHECK(interface_for_address("not an address").empty());
  CHECK(interface_for_address("203.0.113.77").empty());  // TEST-NET-3: nobody's subnet
}

TEST_CASE("interface_toward names the interface on the route to an address") {
  CHECK(local_address_toward("127.0.0.1") == "127.0.0.1");
  CHECK(interface_toward("127.0.0.1") == "lo");
  CHECK(interface_toward("127.0.0.9") == "lo");
  CHECK_THROWS_WITH(local_address_toward("node1"), Catch::Contains("node1"));
}
