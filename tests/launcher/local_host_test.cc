// Which hosts are this machine: only literal names and addresses, never a resolution.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/local_host.h"

using hvdrun::launcher::interface_address;
using hvdrun::launcher::interface_addresses;
using hvdrun::launcher::is_local_host;

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
