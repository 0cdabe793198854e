// Tests of rank placement: fill order, -np handling, and Horovod's local/cross
// coordinates on even and uneven hosts.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "common/error.h"
#include "hostfile/placement.h"

using hvdrun::UsageError;
using hvdrun::hostfile::HostSlots;
using hvdrun::hostfile::place;
using hvdrun::hostfile::Placement;

namespace {

// One rank's coordinates as a compact tuple: host, local_rank, local_size, cross_rank,
// cross_size.
struct Coord {
  int host, local_rank, local_size, cross_rank, cross_size;
  bool operator==(const Coord&) const = default;
};

std::vector<Coord> coords(const Placement& p) {
  std::vector<Coord> out;
  for (const auto& r : p.ranks) {
    out.push_back({r.host_index, r.local_rank, r.local_size, r.cross_rank, r.cross_size});
  }
  return out;
}

std::string error_of(const std::vector<HostSlots>& hosts, std::optional<int> np) {
  try {
    place(hosts, np);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

namespace Catch {
template <>
struct StringMaker<Coord> {
  static std::string convert(const Coord& c) {
    return "{h" + std::to_string(c.host) + " lr" + std::to_string(c.local_rank) + " ls" +
           std::to_string(c.local_size) + " cr" + std::to_string(c.cross_rank) + " cs" +
           std::to_string(c.cross_size) + "}";
  }
};
}  // namespace Catch

TEST_CASE("placement of horovodrun's examples") {
  SECTION("-np 4 -H localhost:4") {
    auto p = place({{"localhost", 4}}, 4);
    CHECK(p.hosts == std::vector<HostSlots>{{"localhost", 4}});
    CHECK(coords(p) ==
          std::vector<Coord>{{0, 0, 4, 0, 1}, {0, 1, 4, 0, 1}, {0, 2, 4, 0, 1}, {0, 3, 4, 0, 1}});
  }
  SECTION("-np 8 -H server1:4,server2:4") {
    auto p = place({{"server1", 4}, {"server2", 4}}, 8);
    CHECK(p.size() == 8);
    CHECK(p.hosts == std::vector<HostSlots>{{"server1", 4}, {"server2", 4}});
    for (int r = 0; r < 8; ++r) {
      CHECK(p.ranks[r].rank == r);
      CHECK(p.ranks[r].host_index == r / 4);
      CHECK(p.ranks[r].local_rank == r % 4);
      CHECK(p.ranks[r].local_size == 4);
      CHECK(p.ranks[r].cross_rank == r / 4);
      CHECK(p.ranks[r].cross_size == 2);
    }
  }
  SECTION("-np 16 -H server1:4,server2:4,server3:4,server4:4") {
    auto p = place({{"server1", 4}, {"server2", 4}, {"server3", 4}, {"server4", 4}}, 16);
    CHECK(p.ranks[13].host_index == 3);
    CHECK(p.ranks[13].local_rank == 1);
    CHECK(p.ranks[13].cross_rank == 3);
    CHECK(p.ranks[13].cross_size == 4);
  }
}

TEST_CASE("placement on uneven hosts") {
  SECTION("a:3,b:1,c:2 with all slots") {
    auto p = place({{"a", 3}, {"b", 1}, {"c", 2}}, std::nullopt);
    // local_rank 0 exists on a, b, c; local_rank 1 on a, c; local_rank 2 on a only.
    CHECK(coords(p) == std::vector<Coord>{{0, 0, 3, 0, 3},
                                          {0, 1, 3, 0, 2},
                                          {0, 2, 3, 0, 1},
                                          {1, 0, 1, 1, 3},
                                          {2, 0, 2, 2, 3},
                                          {2, 1, 2, 1, 2}});
  }
  SECTION("-np fills hosts in order and drops hosts without ranks") {
    auto p = place({{"a", 2}, {"b", 2}, {"c", 2}}, 3);
    CHECK(p.hosts == std::vector<HostSlots>{{"a", 2}, {"b", 1}});
    CHECK(coords(p) == std::vector<Coord>{{0, 0, 2, 0, 2}, {0, 1, 2, 0, 1}, {1, 0, 1, 1, 2}});
  }
  SECTION("fewer ranks than the first host's slots") {
    auto p = place({{"a", 8}, {"b", 8}}, 2);
    CHECK(p.hosts == std::vector<HostSlots>{{"a", 2}});
    CHECK(coords(p) == std::vector<Coord>{{0, 0, 2, 0, 1}, {0, 1, 2, 0, 1}});
  }
  SECTION("one slot per host") {
    auto p = place({{"a", 1}, {"b", 1}, {"c", 1}}, std::nullopt);
    CHECK(coords(p) == std::vector<Coord>{{0, 0, 1, 0, 3}, {1, 0, 1, 1, 3}, {2, 0, 1, 2, 3}});
  }
  SECTION("a small host before a big one") {
    auto p = place({{"a", 1}, {"b", 3}}, std::nullopt);
    CHECK(coords(p) ==
          std::vector<Coord>{{0, 0, 1, 0, 2}, {1, 0, 3, 1, 2}, {1, 1, 3, 0, 1}, {1, 2, 3, 0, 1}});
  }
}

TEST_CASE("placement invariants hold for many shapes") {
  for (int hosts_n = 1; hosts_n <= 5; ++hosts_n) {
    for (int seed = 0; seed < 20; ++seed) {
      std::vector<HostSlots> hosts;
      int total = 0;
      for (int h = 0; h < hosts_n; ++h) {
        int slots = 1 + (seed * 7 + h * 3) % 4;
        hosts.push_back({"h" + std::to_string(h), slots});
        total += slots;
      }
      for (int np = 1; np <= total; ++np) {
        auto p = place(hosts, np);
        REQUIRE(p.size() == np);
        int placed = 0;
        for (const auto& h : p.hosts) placed += h.slots;
        CHECK(placed == np);
        for (const auto& r : p.ranks) {
          CHECK(r.local_rank < r.local_size);
          CHECK(r.local_size == p.hosts[r.host_index].slots);
          CHECK(r.cross_rank < r.cross_size);
          // cross_size counts the hosts that have this local_rank.
          int with_lr = 0;
          int before = 0;
          for (size_t hi = 0; hi < p.hosts.size(); ++hi) {
            if (p.hosts[hi].slots > r.local_rank) {
              if (static_cast<int>(hi) < r.host_index) ++before;
              ++with_lr;
            }
          }
          CHECK(r.cross_size == with_lr);
          CHECK(r.cross_rank == before);
        }
      }
    }
  }
}

TEST_CASE("placement errors") {
  CHECK(error_of({{"localhost", 4}, {"node1", 4}}, 9) ==
        "-np 9 but the hosts have 8 slots (localhost:4, node1:4); lower -np or add slots");
  CHECK(error_of({{"localhost", 1}}, 2) ==
        "-np 2 but the hosts have 1 slot (localhost:1); lower -np or add slots");
  CHECK(error_of({{"::1", 2}}, 3) ==
        "-np 3 but the hosts have 2 slots ([::1]:2); lower -np or add slots");
  std::vector<HostSlots> many;
  for (int i = 0; i < 10; ++i) many.push_back({"n" + std::to_string(i), 1});
  CHECK(error_of(many, 11) ==
        "-np 11 but the hosts have 10 slots (n0:1, n1:1, n2:1, n3:1, n4:1, n5:1, n6:1, n7:1, "
        "and 2 more hosts); lower -np or add slots");
  CHECK(error_of({{"a", 1}}, 0) ==
        "-np 0 is not a positive number of processes; expected -np N with N >= 1");
  CHECK(error_of({{"a", 1}}, -3) ==
        "-np -3 is not a positive number of processes; expected -np N with N >= 1");
  CHECK(error_of({}, 1) ==
        "no hosts to place ranks on; expected -H host[:slots],... or --hostfile FILE");
  CHECK(error_of({{"a", 0}}, std::nullopt) == "host 'a' has 0 slots; expected at least 1");
}
