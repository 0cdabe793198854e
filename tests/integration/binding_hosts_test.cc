// --bind-to on hosts the launcher reaches through an agent: the loopback SSH hosts
// (node1, node2: this machine behind sshd) and the loopback Slurm (agents started by srun
// with --cpus-per-task=1). Each rank's Cpus_allowed_list is a CPU set of its own inside its
// agent's (the step's) allowed set, its memory policy binds it to the NUMA nodes of the
// plan, and --bind-to none leaves every allowed CPU and the default memory policy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"
#include "tests/skip.h"
#include "tests/support/processes.h"
#include "tests/support/slurm_cluster.h"
#include "tests/support/sshd_cluster.h"

using hvdrun::launcher::BindTo;
using hvdrun::launcher::cpu_list_text;
using hvdrun::launcher::HostTopology;
using hvdrun::launcher::load_host_topology;
using hvdrun::launcher::MapBy;
using hvdrun::launcher::plan_placement;
using namespace hvdrun::testing;

namespace {

// One line per rank: its CPUs, its memory nodes, its memory policy (numa_maps' word for
// the task's policy: "default", "bind:0") and its agent's CPUs (the rank's parent).
constexpr const char* kShow =
    "c=$(awk '/^Cpus_allowed_list/{print $2}' /proc/self/status); "
    "m=$(awk '/^Mems_allowed_list/{print $2}' /proc/self/status); "
    "p=$(awk 'NR==1{print $2}' /proc/self/numa_maps); "
    "a=$(awk '/^Cpus_allowed_list/{print $2}' /proc/$PPID/status); "
    "echo \"cpus=$c mems=$m policy=$p agent=$a\"";

struct Seen {
  std::string cpus, mems, policy, agent;
};

// "[r]<stdout>:cpus=... mems=... policy=... agent=..." for ranks 0..np-1.
std::vector<Seen> seen_by_rank(const std::string& out, int np) {
  std::vector<Seen> got(static_cast<std::size_t>(np));
  int lines_seen = 0;
  for (const auto& line : lines(out)) {
    std::string_view s = line;
    int rank = -1;
    REQUIRE(take(s, "["));
    REQUIRE(take_int(s, rank));
    REQUIRE(take(s, "]<stdout>:"));
    REQUIRE((rank >= 0 && rank < np));
    Seen& r = got[static_cast<std::size_t>(rank)];
    std::string* fields[] = {&r.cpus, &r.mems, &r.policy, &r.agent};
    const char* names[] = {"cpus=", "mems=", "policy=", "agent="};
    for (int f = 0; f < 4; ++f) {
      REQUIRE(take(s, names[f]));
      const auto end = std::min(s.find(' '), s.size());
      *fields[f] = std::string(s.substr(0, end));
      s.remove_prefix(std::min(end + 1, s.size()));
    }
    ++lines_seen;
  }
  CHECK(lines_seen == np);
  return got;
}

// The CPUs of a Cpus_allowed_list ("0-3,8").
std::set<int> cpu_set(const std::string& list) {
  std::set<int> out;
  std::string_view s = list;
  while (!s.empty()) {
    int lo = 0;
    REQUIRE(take_int(s, lo));
    int hi = lo;
    if (take(s, "-")) REQUIRE(take_int(s, hi));
    for (int c = lo; c <= hi; ++c) out.insert(c);
    if (!take(s, ",")) REQUIRE(s.empty());
  }
  return out;
}

// Every rank bound to CPUs of its own, one core's threads each, inside its agent's CPUs,
// and its memory bound to the nodes of those CPUs; `want`, when given, is each rank's CPU
// list as the plan has it.
void check_bound(const HostTopology& host, const std::vector<Seen>& got,
                 const std::vector<std::string>& want = {}) {
  std::set<int> taken;
  for (std::size_t r = 0; r < got.size(); ++r) {
    INFO("rank " << r << ": cpus=" << got[r].cpus << " agent=" << got[r].agent);
    const auto mine = cpu_set(got[r].cpus);
    const auto agent = cpu_set(got[r].agent);
    if (!want.empty()) CHECK(got[r].cpus == want[r]);
    CHECK(std::includes(agent.begin(), agent.end(), mine.begin(), mine.end()));
    for (int c : mine) CHECK(taken.insert(c).second);
    const auto core = std::find_if(host.cores.begin(), host.cores.end(), [&](const auto& k) {
      return !mine.empty() && k.pus.front() == *mine.begin();
    });
    REQUIRE(core != host.cores.end());
    CHECK(std::vector<int>(mine.begin(), mine.end()) == core->pus);
    CHECK(got[r].policy == "bind:" + std::to_string(core->numa));
    CHECK(cpu_set(got[r].mems).count(core->numa) == 1);  // the cpuset lets it use that node
  }
}

// The CPUS column of --report-bindings' rows for `host`, by rank ("" where it has none).
std::vector<std::string> reported_cpus(const std::string& err, const std::string& host, int np) {
  std::vector<std::string> out(static_cast<std::size_t>(np));
  for (const auto& line : lines(err)) {
    std::vector<std::string> cols;
    for (std::size_t i = 0; i < line.size();) {
      const auto start = line.find_first_not_of(' ', i);
      if (start == std::string::npos) break;
      const auto end = std::min(line.find(' ', start), line.size());
      cols.push_back(line.substr(start, end - start));
      i = end;
    }
    int rank = -1;
    std::string_view first = cols.empty() ? std::string_view() : cols[0];
    if (cols.size() != 8 || cols[1] != host || !take_int(first, rank) || rank >= np) continue;
    out[static_cast<std::size_t>(rank)] = cols[4];
  }
  return out;
}

SshdCluster& ssh_cluster() {
  static SshdCluster c(2);
  return c;
}

}  // namespace

TEST_CASE("bind-to core on an SSH host gives each rank its own CPUs of that host") {
  const HostTopology here = load_host_topology();  // node1 is this machine behind sshd
  if (here.cores.size() < 2) HVDRUN_SKIP("binding two ranks needs two cores");
  const auto plan = plan_placement(here, "node1", {0, 1}, {BindTo::core, MapBy::slot, 1, 0});
  Hvdrun h({"--ssh-config", ssh_cluster().ssh_config(), "-H", "node1:2", "--bind-to", "core",
            "--report-bindings", "sh", "-c", kShow});
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  const std::vector<std::string> want = {cpu_list_text(plan[0].cpus), cpu_list_text(plan[1].cpus)};
  check_bound(here, seen_by_rank(h.out, 2), want);
  // The report shows node1's rows from the topology its agent sent, before its ranks ran.
  CHECK(reported_cpus(h.err, "node1", 2) == want);
  CHECK(h.err.find("RANK  HOST   LOCAL  CORES  CPUS") < h.err.find("0     node1  0"));
}

TEST_CASE("an SSH host that cannot place its ranks stops the job before any rank starts") {
  const HostTopology here = load_host_topology();  // node1's, behind sshd
  const std::string np = std::to_string(here.cores.size() + 1);
  Hvdrun h({"--ssh-config", ssh_cluster().ssh_config(), "-H", "localhost:1,node1:" + np,
            "--bind-to", "core", "sh", "-c", "echo started"});
  CHECK(h.wait() == 2);
  CHECK(h.out.empty());  // not even this machine's rank 0
  CHECK(count(h.err, "hvdrun: error: host node1: " + np + " ranks x 1 core per rank need " + np +
                         " cores, and " + std::to_string(here.cores.size()) +
                         " cores are allowed here") == 1);
}

TEST_CASE("bind-to none on SSH hosts leaves every allowed CPU and the default memory policy") {
  Hvdrun h(
      {"--ssh-config", ssh_cluster().ssh_config(), "-H", "node1:1,node2:1", "sh", "-c", kShow});
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  for (const auto& r : seen_by_rank(h.out, 2)) {
    CHECK(r.cpus == r.agent);
    CHECK(r.policy == "default");
  }
}

TEST_CASE("under Slurm with --cpus-per-task=1, ranks are bound inside the step's CPUs") {
  if (!SlurmCluster::available()) HVDRUN_SKIP("the Slurm and munge packages are not installed");
  const HostTopology here = load_host_topology();
  if (here.cores.size() < 2) HVDRUN_SKIP("binding two ranks needs two cores");
  const SlurmCluster cluster(1, 2);
  CapturedProcess h(
      cluster.client({"salloc", "-N1", "-n2", "--cpus-per-task=1", "--quiet", hvdrun_binary(),
                      "--bind-to", "core", "--report-bindings", "sh", "-c", kShow}));
  INFO("stderr: " << h.err);
  REQUIRE(h.wait(std::chrono::seconds(60)) == 0);
  // The step's allowed CPUs are its agent's: every rank's own core inside them.
  const auto got = seen_by_rank(h.out, 2);
  check_bound(here, got);
  CHECK(got[0].agent == got[1].agent);
  // Reported as its agent placed them, from that agent's own topology.
  CHECK(reported_cpus(h.err, "node1", 2) == std::vector<std::string>{got[0].cpus, got[1].cpus});

  // Without --bind-to, --cpus-per-task binds each rank to an equal share of its node's CPUs
  // (here one core of two), as srun binds its tasks, and says so once.
  CapturedProcess d(cluster.client({"salloc", "-N1", "-n2", "--cpus-per-task=1", "--quiet",
                                    hvdrun_binary(), "sh", "-c", kShow}));
  INFO("stderr (default): " << d.err);
  REQUIRE(d.wait(std::chrono::seconds(60)) == 0);
  check_bound(here, seen_by_rank(d.out, 2));
  CHECK(count(d.err,
              "hvdrun: inside Slurm with --cpus-per-task, each rank is bound to an equal "
              "share of its node's CPUs in the allocation") == 1);
  // --bind-to none turns it off.
  CapturedProcess n(cluster.client({"salloc", "-N1", "-n2", "--cpus-per-task=1", "--quiet",
                                    hvdrun_binary(), "--bind-to", "none", "sh", "-c", kShow}));
  INFO("stderr (none): " << n.err);
  REQUIRE(n.wait(std::chrono::seconds(60)) == 0);
  for (const auto& r : seen_by_rank(n.out, 2)) CHECK(r.cpus == r.agent);
  CHECK(n.err.find("equal share") == std::string::npos);
}
