// The topology probe (`hvdrun agent --topology`) that an SSH host runs for `hvdrun check
// --topology`, dry runs that bind and `host:auto`: its text read back whole, with the GPU
// list the host gives its ranks, and anything else refused by name.
#include "launcher/hosts/host_topologies.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "launcher/topology/topology_wire.h"
#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("the topology probe of an SSH host is read back with its GPU list", "[topology]") {
  HostTopology t = testing::two_socket_eight_gpu();
  t.hostname = "node1";
  const std::string wire = topology_to_wire(t);
  const ProbedHost p = parse_topology_probe("gpus 0,2,GPU-x\nfrom CUDA_VISIBLE_DEVICES\n" + wire);
  REQUIRE(p.topology);
  CHECK(topology_to_wire(*p.topology) == wire);
  CHECK(p.gpu_ids == std::vector<std::string>{"0", "2", "GPU-x"});
  CHECK(p.gpus_from == "CUDA_VISIBLE_DEVICES");
  CHECK(parse_topology_probe("gpus -\nfrom hwloc\n" + wire).gpu_ids.empty());
  // What this machine's own probe prints reads back as this machine.
  const ProbedHost here = parse_topology_probe(topology_probe_text());
  CHECK(topology_to_wire(*here.topology) == topology_to_wire(load_host_topology()));
  // A shell's noise in place of the probe, or a cut-off probe, is refused by name.
  CHECK_THROWS_WITH(parse_topology_probe("welcome\ngpus -\n"),
                    "the topology probe's output has 'welcome' where its 'gpus' line belongs");
  CHECK_THROWS_WITH(parse_topology_probe("gpus -"),
                    "the topology probe's output ends before its 'gpus' line");
  CHECK_THROWS_WITH(parse_topology_probe("gpus -\nfrom x\ncore 1\n"), Contains("'core 1'"));
}

}  // namespace
}  // namespace hvdrun::launcher
