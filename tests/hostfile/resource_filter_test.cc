// --include / --exclude against DeepSpeed's documented forms (worker-0:0,2@worker-1), and the
// hostfile's gpus= list they select from.
#include "hostfile/resource_filter.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/error.h"

namespace hvdrun::hostfile {
namespace {

using Catch::Matchers::Contains;
using Ids = std::vector<std::string>;

// Two hosts of four GPU slots each, as a hostfile `worker-N slots=4` gives them.
std::vector<HostSlots> two_workers() { return {{"worker-0", 4, {}}, {"worker-1", 4, {}}}; }

TEST_CASE("include and exclude select hosts and GPU slots as DeepSpeed does", "[filter]") {
  const auto hosts = two_workers();
  CHECK(filter_hosts(hosts, "", "") == hosts);
  // A host named alone: the whole host.
  CHECK(filter_hosts(hosts, "worker-0", "") == std::vector<HostSlots>{{"worker-0", 4, {}}});
  CHECK(filter_hosts(hosts, "", "worker-1") == std::vector<HostSlots>{{"worker-0", 4, {}}});
  // Slots: one rank per GPU kept, those GPUs as the host's list.
  CHECK(filter_hosts(hosts, "worker-0:1", "") == std::vector<HostSlots>{{"worker-0", 1, Ids{"1"}}});
  CHECK(filter_hosts(hosts, "", "worker-0:1") ==
        std::vector<HostSlots>{{"worker-0", 3, Ids{"0", "2", "3"}}, {"worker-1", 4, {}}});
  CHECK(filter_hosts(hosts, "worker-0:0,2@worker-1", "") ==
        std::vector<HostSlots>{{"worker-0", 2, Ids{"0", "2"}}, {"worker-1", 4, {}}});
  CHECK(
      filter_hosts(hosts, "", "worker-0:0,1@worker-1:3") ==
      std::vector<HostSlots>{{"worker-0", 2, Ids{"2", "3"}}, {"worker-1", 3, Ids{"0", "1", "2"}}});
  // The original order stays, whatever the filter's order; all slots named is the whole host.
  CHECK(filter_hosts(hosts, "worker-1@worker-0:0,1,2,3", "") == hosts);
  // Excluding every slot of a host drops it.
  CHECK(filter_hosts(hosts, "", "worker-0:0,1,2,3") == std::vector<HostSlots>{{"worker-1", 4, {}}});
  // With a hostfile gpus= list the slots are its GPUs.
  const std::vector<HostSlots> listed = {{"node1", 4, Ids{"0", "2", "4", "6"}}};
  CHECK(filter_hosts(listed, "node1:2,6", "") ==
        std::vector<HostSlots>{{"node1", 2, Ids{"2", "6"}}});
  CHECK(filter_hosts({{"localhost", 4, {}}}, "localhost:1", "") ==
        std::vector<HostSlots>{{"localhost", 1, Ids{"1"}}});
}

TEST_CASE("include and exclude refuse what DeepSpeed refuses", "[filter]") {
  const auto hosts = two_workers();
  CHECK_THROWS_WITH(filter_hosts(hosts, "worker-0", "worker-1"),
                    Contains("--include and --exclude were both given"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "jeff", ""),
                    Contains("--include: host 'jeff' is not in the host list (worker-0,worker-1)"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "", "jeff"), Contains("--exclude: host 'jeff'"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "worker-0:4", ""),
                    Contains("--include: host 'worker-0' has no GPU slot '4' (its slots are "
                             "0,1,2,3)"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "", "worker-0:4"), Contains("has no GPU slot '4'"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "", "worker-0@worker-1"),
                    Contains("--exclude 'worker-0@worker-1' leaves no host to run on"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "worker-0@", ""), Contains("an empty entry"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "worker-0:", ""), Contains("no GPU listed"));
  CHECK_THROWS_WITH(filter_hosts(hosts, "worker-0:1,,2", ""), Contains("an empty GPU"));
  CHECK(filter_hosts({{"::1", 2, {}}}, "[::1]:1", "") ==
        std::vector<HostSlots>{{"::1", 1, Ids{"1"}}});
}

TEST_CASE("a hostfile line lists its GPUs with gpus=", "[filter]") {
  CHECK(parse_hostfile_text("node1 slots=4 gpus=0,2,4,6\nnode2:2 gpus=GPU-5d2c,MIG-1/2\n", "hf")
            .front() == HostSlots{"node1", 4, Ids{"0", "2", "4", "6"}});
  CHECK_THROWS_WITH(parse_hostfile_text("node1 gpus=0,0\n", "hf"),
                    Contains("hf:1: GPU '0' listed twice in gpus= of host 'node1'"));
  CHECK_THROWS_WITH(parse_hostfile_text("node1 gpus=0 gpus=1\n", "hf"),
                    Contains("hf:1: gpus given twice"));
  CHECK_THROWS_WITH(parse_hostfile_text("node1 gpus=\n", "hf"), Contains("hf:1:"));
  CHECK(parse_hostfile_text("node1 slots=2 gpus=GPU-5d2c-11,MIG-1\n", "hf").front().gpus ==
        Ids{"GPU-5d2c-11", "MIG-1"});
}

}  // namespace
}  // namespace hvdrun::hostfile
