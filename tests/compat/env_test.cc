// Every compatibility variable at every rank of an uneven placement.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "compat/env.h"
#include "hostfile/placement.h"

namespace hvdrun::compat {
namespace {

using Vars = std::map<std::string, std::string>;

Vars as_map(const std::vector<std::pair<std::string, std::string>>& list) {
  Vars m;
  for (const auto& [k, v] : list) {
    REQUIRE(m.count(k) == 0);  // no variable twice
    m[k] = v;
  }
  return m;
}

HostEndpoints endpoints_for(const std::string& host) {
  HostEndpoints e;
  e.horovod_rendezvous_addr = host == "a" ? "127.0.0.1" : "10.0.0.1";
  e.horovod_rendezvous_port = 4242;
  e.master_addr = host == "a" ? "127.0.0.1" : "10.0.0.1";
  e.master_port = 29500;
  e.iface = host == "a" ? "lo" : "eth" + host;
  return e;
}

}  // namespace

TEST_CASE("compat_env gives every rank of an uneven placement its Horovod and torch variables") {
  // a:3, b:1, c:2 -> ranks 0-2 on a, 3 on b, 4-5 on c.
  auto placement = hostfile::place({{"a", 3}, {"b", 1}, {"c", 2}}, 6);
  struct Expect {
    const char* host;
    int local_rank, local_size, cross_rank, cross_size, group_rank;
  };
  const Expect expect[] = {
      {"a", 0, 3, 0, 3, 0}, {"a", 1, 3, 0, 2, 0}, {"a", 2, 3, 0, 1, 0},
      {"b", 0, 1, 1, 3, 1}, {"c", 0, 2, 2, 3, 2}, {"c", 1, 2, 1, 2, 2},
  };
  for (int rank = 0; rank < 6; ++rank) {
    CAPTURE(rank);
    const auto& e = expect[rank];
    auto env = compat_env(placement, rank, endpoints_for(e.host));
    auto set = as_map(env.set);
    auto defaults = as_map(env.defaults);
    const auto s = [](int v) { return std::to_string(v); };
    const Vars want_set = {
        {"HOROVOD_HOSTNAME", e.host},
        {"HOROVOD_RANK", s(rank)},
        {"HOROVOD_SIZE", "6"},
        {"HOROVOD_LOCAL_RANK", s(e.local_rank)},
        {"HOROVOD_LOCAL_SIZE", s(e.local_size)},
        {"HOROVOD_CROSS_RANK", s(e.cross_rank)},
        {"HOROVOD_CROSS_SIZE", s(e.cross_size)},
        {"HOROVOD_GLOO_RENDEZVOUS_ADDR", std::string(e.host) == "a" ? "127.0.0.1" : "10.0.0.1"},
        {"HOROVOD_GLOO_RENDEZVOUS_PORT", "4242"},
        {"HOROVOD_CONTROLLER", "gloo"},
        {"HOROVOD_CPU_OPERATIONS", "gloo"},
        {"RANK", s(rank)},
        {"WORLD_SIZE", "6"},
        {"LOCAL_RANK", s(e.local_rank)},
        {"LOCAL_WORLD_SIZE", s(e.local_size)},
        {"GROUP_RANK", s(e.group_rank)},
        {"GROUP_WORLD_SIZE", "3"},
        {"ROLE_RANK", s(rank)},
        {"ROLE_WORLD_SIZE", "6"},
        {"ROLE_NAME", "default"},
        {"MASTER_ADDR", std::string(e.host) == "a" ? "127.0.0.1" : "10.0.0.1"},
        {"MASTER_PORT", "29500"},
    };
    CHECK(set == want_set);
    Vars want_defaults = {
        {"HOROVOD_GLOO_IFACE", std::string(e.host) == "a" ? "lo" : std::string("eth") + e.host},
        {"NCCL_SOCKET_IFNAME", std::string(e.host) == "a" ? "lo" : std::string("eth") + e.host},
        {"PYTHONUNBUFFERED", "1"},
    };
    // Only hosts running several ranks get torchrun's OMP_NUM_THREADS=1 (b runs one).
    if (e.local_size > 1) want_defaults["OMP_NUM_THREADS"] = "1";
    CHECK(defaults == want_defaults);
    // Nothing is both forced and defaulted.
    for (const auto& [k, v] : defaults) CHECK(set.count(k) == 0);
  }
}

TEST_CASE("compat_env follows -np below the slot count and optional settings") {
  auto placement = hostfile::place({{"a", 3}, {"b", 1}, {"c", 2}}, 5);
  HostEndpoints host;
  host.horovod_rendezvous_addr = "::1";
  host.horovod_rendezvous_port = 1;
  host.master_addr = "::1";
  host.master_port = 2;
  auto last = as_map(compat_env(placement, 4, host).set);
  CHECK(last["HOROVOD_HOSTNAME"] == "c");
  CHECK(last["HOROVOD_LOCAL_SIZE"] == "1");
  CHECK(last["HOROVOD_CROSS_RANK"] == "2");
  CHECK(last["HOROVOD_CROSS_SIZE"] == "3");
  CHECK(last["WORLD_SIZE"] == "5");
  CHECK(last.count("HOROVOD_GLOO_TIMEOUT_SECONDS") == 0);
  auto defaults = as_map(compat_env(placement, 4, host).defaults);
  CHECK(defaults.count("HOROVOD_GLOO_IFACE") == 0);  // no interface given: left unset
  CHECK(defaults.count("OMP_NUM_THREADS") == 0);     // c runs one rank now

  host.gloo_timeout_s = 120;
  CHECK(as_map(compat_env(placement, 0, host).set)["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "120");
  CHECK_THROWS_AS(compat_env(placement, 5, host), std::out_of_range);
  CHECK_THROWS_AS(compat_env(placement, -1, host), std::out_of_range);
}

TEST_CASE("compat_env for a slot equals compat_env for the placement's rank") {
  auto placement = hostfile::place({{"a", 3}, {"b", 1}, {"c", 2}}, 6);
  for (int rank = 0; rank < 6; ++rank) {
    const auto& slot = placement.ranks[static_cast<std::size_t>(rank)];
    const auto& name = placement.hosts[static_cast<std::size_t>(slot.host_index)].name;
    auto by_slot = compat_env(slot, name, 6, 3, endpoints_for(name));
    auto by_rank = compat_env(placement, rank, endpoints_for(name));
    CHECK(by_slot.set == by_rank.set);
    CHECK(by_slot.defaults == by_rank.defaults);
  }
}

}  // namespace hvdrun::compat
