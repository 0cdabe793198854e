// The topology probe (`hvdrun agent --topology`) that an SSH host runs for `hvdrun check
// --topology`, dry runs that bind and `host:auto`: its text read back whole, with the GPU
// list the host gives its ranks, and anything else refused by name.
#include "launcher/hosts/host_topologies.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/plan/launch_method.h"
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

// A host that must never be logged in to: the refusals below come before any login.
struct NoLogin : ssh::Connector {
  std::unique_ptr<ssh::Session> connect(const ssh::Target& target, ssh::Deadline) override {
    throw std::logic_error("logged in to " + target.alias + " for a launch it refuses");
  }
};

TEST_CASE("host:auto and -np auto are refused where no host can be counted first", "[topology]") {
  NoLogin never;
  LaunchOptions none;  // nothing counted: the options come back as given
  none.hosts = {{"node1", 2}};
  CHECK(with_counted_slots(none, never).hosts == none.hosts);

  LaunchOptions elastic;
  elastic.hosts = {{"node1", 1, {}, true}};
  elastic.elastic.min_np = 1;
  CHECK_THROWS_WITH(with_counted_slots(elastic, never),
                    Contains("elastic mode takes its hosts from -H or the discovery script"));

  LaunchOptions exec;
  exec.hosts = {{"node1", 1, {}, true}};
  exec.launcher = parse_launcher("exec:true {host}");
  CHECK_THROWS_WITH(with_counted_slots(exec, never),
                    Contains("host node1: node1:auto counts its GPUs before the start, and it is "
                             "reached by the exec: command") &&
                        Contains("give its number of slots"));

  LaunchOptions given;
  given.np_auto = true;
  given.hosts = {{"node1", 4}};
  CHECK_THROWS_WITH(with_counted_slots(given, never),
                    Contains("host node1 is given 4 slots; write node1:auto"));

  // -np auto inside an allocation: its hosts are not read before the start.
  ::setenv("SLURM_JOB_ID", "7", 1);
  ::setenv("SLURM_JOB_NODELIST", "n[1-2]", 1);
  ::setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
  LaunchOptions allocation;
  allocation.np_auto = true;
  std::string why;
  try {
    with_counted_slots(allocation, never);
  } catch (const UsageError& e) {
    why = e.what();
  }
  ::unsetenv("SLURM_JOB_ID");
  ::unsetenv("SLURM_JOB_NODELIST");
  ::unsetenv("SLURM_TASKS_PER_NODE");
  CHECK_THAT(why, Contains("'s allocation are not read before the start: give -np N"));
}

}  // namespace
}  // namespace hvdrun::launcher
