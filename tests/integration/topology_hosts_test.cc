// Each host's hardware read before anything starts, over the loopback SSH hosts (node1,
// node2: this machine behind sshd, whose sessions say the host has three GPUs through
// HVDRUN_FAKE_GPUS): `hvdrun check --topology -H ...`, `--dry-run` with a binding (each
// SSH host planned from the topology it printed), and `-H host:auto` / `-np auto` (one
// rank per GPU the host has).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"
#include "launcher/topology/topology_report.h"
#include "tests/skip.h"
#include "tests/support/processes.h"
#include "tests/support/sshd_cluster.h"

using hvdrun::launcher::BindTo;
using hvdrun::launcher::HostTopology;
using hvdrun::launcher::load_host_topology;
using hvdrun::launcher::MapBy;
using hvdrun::launcher::plan_placement;
using hvdrun::launcher::render_topology_table;
using namespace hvdrun::testing;

namespace {

SshdCluster& gpu_hosts() {
  static SshdCluster c(2, {"HVDRUN_FAKE_GPUS=GPU-a,GPU-b,GPU-c"});
  return c;
}

std::string json_numbers(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

}  // namespace

TEST_CASE("check --topology reads each SSH host there and names a host it cannot read") {
  const HostTopology here = load_host_topology();
  const std::string cfg = gpu_hosts().ssh_config();
  Hvdrun h({"check", "--topology", "--ssh-config", cfg, "-H", "localhost,node1,nodeX.invalid"});
  INFO("stdout: " << h.out << "\nstderr: " << h.err);
  CHECK(h.wait() == 255);  // one host was not read
  // node1 is this machine behind sshd: its table is this machine's, and its sessions'
  // GPU list is what its ranks would be given.
  const std::string node1 = h.out.substr(h.out.find("== node1 =="));
  CHECK(node1.find(render_topology_table(here)) != std::string::npos);
  CHECK(node1.find("GPUs its ranks are given: GPU-a,GPU-b,GPU-c (from HVDRUN_FAKE_GPUS)") !=
        std::string::npos);
  CHECK(h.out.find("== localhost ==\n" + render_topology_table(here)) != std::string::npos);
  CHECK(h.out.find("== nodeX.invalid ==\nnot read: dns: ") != std::string::npos);

  Hvdrun j({"check", "--topology", "--json", "--ssh-config", cfg, "-H", "node1,node2"});
  CHECK(j.wait() == 0);
  CHECK(j.out.rfind("{\"ok\": true, \"hosts\": [{\"host\": \"node1\", \"topology\": {", 0) == 0);
  CHECK(count(j.out,
              "\"gpu_ids\": [\"GPU-a\", \"GPU-b\", \"GPU-c\"], \"gpus_from\": "
              "\"HVDRUN_FAKE_GPUS\", \"error\": null}") == 2);
}

TEST_CASE("a dry run with a binding plans each SSH host from the topology it printed") {
  const HostTopology here = load_host_topology();  // node1's, behind sshd
  if (here.cores.size() < 2) HVDRUN_SKIP("binding two ranks needs two cores");
  const auto plan = plan_placement(here, "node1", {1, 2}, {BindTo::core, MapBy::slot, 1, 0});
  const std::string cfg = gpu_hosts().ssh_config();
  Hvdrun h({"--dry-run", "--json", "--ssh-config", cfg, "-H", "localhost:1,node1:2", "--bind-to",
            "core", "sh", "-c", "echo started"});
  INFO("stdout: " << h.out << "\nstderr: " << h.err);
  REQUIRE(h.wait() == 0);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    CHECK(h.out.find("{\"rank\": " + std::to_string(i + 1) +
                     ", \"host\": \"node1\", \"local_rank\": " + std::to_string(i) +
                     ", \"gpus\": null, \"binding\": {\"cores\": " + json_numbers(plan[i].cores) +
                     ", \"cpus\": " + json_numbers(plan[i].cpus) +
                     ", \"numa\": " + json_numbers(plan[i].numa) + ", \"gpus\": [], \"nic\": ") !=
          std::string::npos);
  }
  CHECK(h.out.find("started") == std::string::npos);
  // A host that cannot place its ranks is refused by the dry run as the launch would be.
  const std::string np = std::to_string(here.cores.size() + 1);
  Hvdrun r({"--dry-run", "--ssh-config", cfg, "-H", "node1:" + np, "--bind-to", "core", "true"});
  CHECK(r.wait() == 2);
  CHECK(count(r.err, "hvdrun: error: host node1: " + np + " ranks x 1 core per rank need " + np +
                         " cores") == 1);
}

TEST_CASE("host:auto and -np auto run one rank per GPU each SSH host has") {
  const std::string cfg = gpu_hosts().ssh_config();
  const std::string show = "echo $HVDRUN_SIZE $HVDRUN_LOCAL_SIZE";
  for (const std::vector<std::string>& hosts :
       {std::vector<std::string>{"-H", "node1:auto,node2:auto"},
        std::vector<std::string>{"-np", "auto", "-H", "node1,node2"}}) {
    std::vector<std::string> args = {"--ssh-config", cfg};
    args.insert(args.end(), hosts.begin(), hosts.end());
    args.insert(args.end(), {"sh", "-c", show});
    Hvdrun h(args);
    INFO(hosts[0] << " " << hosts[1] << "\nstdout: " << h.out << "\nstderr: " << h.err);
    REQUIRE(h.wait() == 0);
    CHECK(count(h.out, ">:6 3\n") == 6);
    for (int r = 0; r < 6; ++r) CHECK(count(h.out, "[" + std::to_string(r) + "]<stdout>:") == 1);
  }
  // A count beside -np auto, and a host with no GPU, are refused before anything starts.
  Hvdrun given({"-np", "auto", "--ssh-config", cfg, "-H", "node1:2", "true"});
  CHECK(given.wait() == 2);
  CHECK(count(given.err,
              "-np auto gives each host one rank per GPU, and host node1 is given 2 "
              "slots; write node1:auto, or drop -np auto and give -np N") == 1);
  Hvdrun none({"-H", "localhost:auto", "true"}, {"HVDRUN_FAKE_GPUS="});
  CHECK(none.wait() == 2);
  CHECK(count(none.err, "host localhost: localhost:auto found no GPU there") == 1);
}
