// The table and the JSON of `hvdrun check --topology` on the hand-written two-socket host.
#include "launcher/topology/topology_report.h"

#include <catch2/catch.hpp>

#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("the topology table shows nodes with memory and cores and the devices", "[topology]") {
  const std::string out = render_topology_table(testing::two_socket_eight_gpu());
  CHECK_THAT(out, Contains("host node1: 2 packages, 4 NUMA nodes, 64 cores, 128 CPUs, 8 GPUs, "
                           "2 NICs\n"));
  CHECK_THAT(out, Contains("NUMA  PACKAGE  MEMORY    CORES  CPUS\n"));
  CHECK_THAT(out, Contains("2     1        64.0 GiB  32-47  32-47,96-111\n"));
  CHECK_THAT(out, Contains("7    cuda7  -    3\n"));
  CHECK_THAT(out, Contains("ib1  -    2\n"));
  CHECK_THAT(out, Contains("allowed CPUs: 0-127\n"));
}

TEST_CASE("the topology table says none for a host without GPUs or NICs", "[topology]") {
  HostTopology t = testing::odd_numa(true);
  t.gpus.clear();
  const std::string out = render_topology_table(t);
  CHECK_THAT(out, Contains("GPUs: none\nNICs: none\n"));
  // The memory-only node: no cores, no CPUs; node 1: no memory.
  CHECK_THAT(out, Contains("2     0        1.0 GiB  -      -\n"));
  CHECK_THAT(out, Contains("1     0        0        2-3    2-3\n"));
}

TEST_CASE("the topology JSON has every part with unknown numbers as null", "[topology]") {
  HostTopology t = testing::odd_numa(false);
  t.nics.push_back(Nic{"eth\"0", "0000:18:00.0", -1});
  const std::string out = render_topology_json(t);
  CHECK_THAT(out, Contains("{\"host\": \"odd\", \"allowed_cpus\": [0, 1, 2, 3], \"packages\": "
                           "[{\"index\": 0, \"numa_nodes\": [0, 1, 2]}]"));
  CHECK_THAT(out, Contains("{\"os_index\": 2, \"package\": 0, \"memory_bytes\": 1073741824, "
                           "\"cores\": [], \"cpus\": []}"));
  CHECK_THAT(out, Contains("{\"index\": 3, \"package\": 0, \"numa\": 1, \"l3\": null, "
                           "\"cpus\": [3]}"));
  CHECK_THAT(out, Contains("{\"index\": 1, \"name\": \"cuda1\", \"pci_bus_id\": \"\", "
                           "\"numa\": 2}"));
  CHECK_THAT(out, Contains("\"nics\": [{\"name\": \"eth\\\"0\", \"pci_bus_id\": \"0000:18:00.0\", "
                           "\"numa\": null}]}\n"));
}

}  // namespace
}  // namespace hvdrun::launcher
