// The topology an agent sends with its readiness (topology_wire.h): written and read back
// whole, for the eight-GPU node and this machine, and a malformed line refused by name.
#include "launcher/topology/topology_wire.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>

#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("a topology goes through its wire text unchanged", "[topology]") {
  HostTopology t = testing::two_socket_eight_gpu();
  t.hostname = "node1";
  t.interfaces = {"lo", "ib0", "docker0"};
  t.addressed = {"docker0", "lo"};
  const std::string text = topology_to_wire(t);
  CHECK(text.rfind("host node1\nallowed 0-127\npackage 0\npackage 1\n"
                   "numa 0 0 68719476736 0-15,64-79\n",
                   0) == 0);
  CHECK_THAT(text, Contains("\ncore 17 0 1 2 17,81\n"));
  CHECK_THAT(text, Contains("\nnic ib1 - 2\nif lo\nif ib0\nif docker0\naddr docker0\naddr lo\n"));
  const HostTopology back = topology_from_wire(text);
  CHECK(topology_to_wire(back) == text);
  CHECK(back.cores.size() == 64);
  CHECK(back.gpus[5].numa == 2);
  CHECK(back.numa(3)->memory_bytes == t.numa(3)->memory_bytes);
  CHECK(back.addressed == t.addressed);
  // This machine's own, whatever it is.
  const HostTopology here = load_host_topology();
  CHECK(topology_to_wire(topology_from_wire(topology_to_wire(here))) == topology_to_wire(here));
  CHECK_FALSE(here.interfaces.empty());
  // Loopback is up with 127.0.0.1 wherever these tests run (they listen on it); every
  // interface with an address is one of the host's interfaces.
  CHECK(std::find(here.addressed.begin(), here.addressed.end(), "lo") != here.addressed.end());
  for (const auto& name : here.addressed) {
    CHECK(std::find(here.interfaces.begin(), here.interfaces.end(), name) != here.interfaces.end());
  }
}

TEST_CASE("a malformed topology line is refused with the line", "[topology]") {
  CHECK_THROWS_WITH(topology_from_wire("host a\ncore 1 0 0\n"),
                    "topology report: line 'core 1 0 0' is not one of its forms");
  CHECK_THROWS_WITH(topology_from_wire("allowed 3-1\n"), Contains("'allowed 3-1'"));
  CHECK_THROWS_WITH(topology_from_wire("numa 0 0 x -\n"), Contains("'numa 0 0 x -'"));
  CHECK_THROWS_WITH(topology_from_wire("disk sda\n"), Contains("'disk sda'"));
  CHECK(topology_from_wire("").cores.empty());
}

}  // namespace
}  // namespace hvdrun::launcher
