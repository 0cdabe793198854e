// The launch plan: host source and its default, placement, and the launch method of each
// host, decided once.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "launcher/launch_plan.h"

using namespace hvdrun::launcher;

namespace {

LaunchOptions with_hosts(std::vector<hvdrun::hostfile::HostSlots> hosts, std::optional<int> np) {
  LaunchOptions o;
  o.hosts = std::move(hosts);
  o.np = np;
  o.command = {"true"};
  return o;
}

}  // namespace

TEST_CASE("no hosts: localhost with -np slots") {
  LaunchOptions o;
  o.np = 3;
  auto plan = make_plan(o);
  CHECK(plan.source == HostSource::localhost);
  REQUIRE(plan.hosts.size() == 1);
  CHECK(plan.hosts[0].name == "localhost");
  CHECK(plan.hosts[0].local);
  CHECK(plan.hosts[0].method == LaunchMethod::local);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1, 2});
  CHECK(plan.size() == 3);
  CHECK(plan.all_local());
}

TEST_CASE("no hosts and no -np is bad usage") {
  CHECK_THROWS_AS(make_plan(LaunchOptions{}), hvdrun::UsageError);
}

TEST_CASE("ranks fill hosts in order; hosts without a rank take no part") {
  auto plan = make_plan(with_hosts({{"localhost", 2}, {"node1", 2}, {"node2", 2}}, 3));
  CHECK(plan.source == HostSource::command_line);
  REQUIRE(plan.hosts.size() == 2);
  CHECK(plan.hosts[0].ranks == std::vector<int>{0, 1});
  CHECK(plan.hosts[1].name == "node1");
  CHECK(plan.hosts[1].slots == 1);
  CHECK(plan.hosts[1].ranks == std::vector<int>{2});
  CHECK(plan.hosts[1].method == LaunchMethod::ssh);
  CHECK_FALSE(plan.hosts[1].local);
  CHECK_FALSE(plan.all_local());
  REQUIRE(plan.placement.hosts.size() == plan.hosts.size());
  for (std::size_t i = 0; i < plan.hosts.size(); ++i)
    CHECK(plan.placement.hosts[i].name == plan.hosts[i].name);
  CHECK(plan.placement.ranks[2].host_index == 1);
}

TEST_CASE("more ranks than slots is bad usage") {
  CHECK_THROWS_AS(make_plan(with_hosts({{"localhost", 1}}, 2)), hvdrun::UsageError);
}

TEST_CASE("the check plan keeps every host and places no rank") {
  auto plan = make_check_plan(with_hosts({{"localhost", 2}, {"127.0.0.2", 2}, {"node2", 1}}, 1));
  REQUIRE(plan.hosts.size() == 3);
  CHECK(plan.size() == 0);
  CHECK(plan.hosts[0].method == LaunchMethod::local);
  CHECK(plan.hosts[1].method == LaunchMethod::ssh);  // loopback, but not this machine's name
  CHECK(plan.hosts[2].slots == 1);
  CHECK(plan.hosts[2].ranks.empty());
  CHECK(to_string(LaunchMethod::ssh) == "ssh");
}
