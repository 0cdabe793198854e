// The hosts an elastic job may use (discovery's latest answer minus the excluded hosts)
// and the hosts whose running processes must leave it, as pure functions.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "launcher/plan/elastic_hosts.h"

using hvdrun::hostfile::HostSlots;
using hvdrun::launcher::host_shrinks;
using hvdrun::launcher::HostShrink;
using hvdrun::launcher::usable_hosts;

namespace {

auto excluding(std::set<std::string> hosts) {
  return [hosts = std::move(hosts)](const std::string& h) { return hosts.count(h) > 0; };
}

}  // namespace

TEST_CASE("usable hosts are discovery's latest answer, in its order, minus the excluded") {
  const std::vector<HostSlots> discovered{{"node3", 2}, {"node1", 1}, {"node2", 4}};
  CHECK(usable_hosts(discovered, excluding({})) == discovered);
  CHECK(usable_hosts(discovered, excluding({"node1"})) ==
        std::vector<HostSlots>{{"node3", 2}, {"node2", 4}});
  // An excluded host discovery does not list changes nothing; a host the job ran on
  // before is not usable unless listed.
  CHECK(usable_hosts(discovered, excluding({"node9"})) == discovered);
  CHECK(usable_hosts({}, excluding({"node1"})).empty());
}

TEST_CASE("a host back from its cooldown is usable while another host has left discovery") {
  // The job ran on node1 and node3; node2 was excluded after a failure. Discovery now lists
  // node2 and node3, not node1, and node2's cooldown is over: node2 is usable.
  const std::vector<HostSlots> discovered{{"node2", 2}, {"node3", 2}};
  const auto usable = usable_hosts(discovered, excluding({}));
  CHECK(usable == discovered);
  CHECK(host_shrinks({{"node1", 2}, {"node3", 2}}, usable) ==
        std::vector<HostShrink>{{"node1", 2, 0, "discovery no longer lists node1"}});
}

TEST_CASE("hosts that left discovery or lost slots shed their processes") {
  const std::vector<HostSlots> running{{"node1", 2}, {"node2", 2}, {"node3", 2}};
  CHECK(host_shrinks(running, running).empty());
  // More slots than processes, or hosts the job does not run on, shed nothing.
  CHECK(host_shrinks(running, {{"node1", 4}, {"node2", 2}, {"node3", 3}, {"node4", 2}}).empty());
  CHECK(host_shrinks(running, {{"node1", 2}, {"node3", 2}}) ==
        std::vector<HostShrink>{{"node2", 2, 0, "discovery no longer lists node2"}});
  CHECK(host_shrinks(running, {{"node1", 2}, {"node2", 1}, {"node3", 2}}) ==
        std::vector<HostShrink>{
            {"node2", 1, 1, "discovery lists node2 with 1 slot, 2 ranks run there"}});
  // Every host gone, in the job's order; a host with no process running sheds nothing.
  CHECK(host_shrinks({{"node1", 2}, {"node2", 0}, {"node3", 1}}, {}) ==
        std::vector<HostShrink>{{"node1", 2, 0, "discovery no longer lists node1"},
                                {"node3", 1, 0, "discovery no longer lists node3"}});
}
