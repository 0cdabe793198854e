// --bind-to on this machine end to end: every rank's Cpus_allowed_list is the CPU list of
// the plan that --report-bindings prints, and --bind-to none leaves every CPU allowed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"
#include "tests/support/processes.h"

using hvdrun::launcher::BindTo;
using hvdrun::launcher::cpu_list_text;
using hvdrun::launcher::HostTopology;
using hvdrun::launcher::load_host_topology;
using hvdrun::launcher::MapBy;
using hvdrun::launcher::plan_placement;
using namespace hvdrun::testing;

namespace {

constexpr const char* kShowCpus = "grep Cpus_allowed_list /proc/self/status";

// "[r]<stdout>:Cpus_allowed_list:\tLIST" for every rank r, sorted by rank.
std::vector<std::string> allowed_lists(const std::string& out, int np) {
  std::vector<std::string> got(static_cast<std::size_t>(np));
  for (const auto& line : lines(out)) {
    const auto tag = line.find("]<stdout>:Cpus_allowed_list:");
    REQUIRE(tag != std::string::npos);
    const int rank = std::stoi(line.substr(1, tag - 1));
    REQUIRE(rank < np);
    std::string list = line.substr(line.find(':', tag + 10) + 1);
    list.erase(0, list.find_first_not_of(" \t"));
    got[static_cast<std::size_t>(rank)] = list;
  }
  return got;
}

}  // namespace

TEST_CASE("bind-to core gives each rank the CPUs of its plan") {
  const HostTopology here = load_host_topology();
  const int np = static_cast<int>(std::min<std::size_t>(2, here.cores.size()));
  const auto plan =
      plan_placement(here, "localhost", np == 1 ? std::vector<int>{0} : std::vector<int>{0, 1},
                     {BindTo::core, MapBy::slot, 1, 0});
  Hvdrun h(
      {"-np", std::to_string(np), "--bind-to", "core", "--report-bindings", "sh", "-c", kShowCpus});
  REQUIRE(h.wait() == 0);
  const auto got = allowed_lists(h.out, np);
  for (int r = 0; r < np; ++r) {
    const std::string want = cpu_list_text(plan[static_cast<std::size_t>(r)].cpus);
    CHECK(got[static_cast<std::size_t>(r)] == want);
    CHECK(count(h.err, std::to_string(r) + "     localhost  " + std::to_string(r)) == 1);
  }
  CHECK(count(h.err, "RANK  HOST       LOCAL  CORES  CPUS") == 1);
}

TEST_CASE("bind-to none leaves every allowed CPU to every rank") {
  const HostTopology here = load_host_topology();
  Hvdrun h({"-np", "2", "sh", "-c", kShowCpus});
  REQUIRE(h.wait() == 0);
  for (const auto& list : allowed_lists(h.out, 2)) {
    CHECK(list == cpu_list_text(here.allowed_cpus));
  }
}

TEST_CASE("more ranks than cores is refused before anything starts when binding") {
  const HostTopology here = load_host_topology();
  const std::string np = std::to_string(here.cores.size() + 1);
  Hvdrun h({"-np", np, "--bind-to", "core", "sh", "-c", "echo started"});
  CHECK(h.wait() == 2);
  CHECK(h.out.empty());
  CHECK(count(h.err, "host localhost: " + np + " ranks x 1 core per rank need " + np + " cores") ==
        1);
}
