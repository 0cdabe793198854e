// The in-memory Store, and runtime code over it without a rendezvous server: threads
// standing in for ranks build a GlooComm through one MemoryStore and reduce.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/gloo_comm.h"

using hvdrun::rendezvous::MemoryStore;
using hvdrun::rendezvous::Store;
using hvdrun::rendezvous::TimeoutError;
using namespace std::chrono_literals;

TEST_CASE("memory store: set, get, add, erase and multi_get", "[store]") {
  MemoryStore store;
  Store& s = store;
  s.set("a", "1");
  s.multi_set({{"b", "2"}, {"c", "3"}});
  CHECK(s.get("a") == std::optional<std::string>("1"));
  CHECK_FALSE(s.get("zz").has_value());
  CHECK(s.multi_get({"c", "zz", "b"}) ==
        std::vector<std::optional<std::string>>{"3", std::nullopt, "2"});
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -2) == 3);
  CHECK(s.erase("a"));
  CHECK_FALSE(s.erase("a"));
  CHECK(store.size() == 3);
}

TEST_CASE("memory store: a wait ends when the keys appear or names the missing ones", "[store]") {
  MemoryStore store;
  auto waiter = std::async(std::launch::async, [&] { return store.wait_for({"x", "y"}, 10s); });
  store.set("x", "1");
  store.set("y", "2");
  CHECK(waiter.get().empty());
  CHECK(store.wait_for({"x", "never"}, 20ms) == std::vector<std::string>{"never"});
  CHECK_THROWS_MATCHES(store.wait({"never"}, 20ms, "check-in"), TimeoutError,
                       Catch::Message("check-in: 'never' did not appear within 20 ms "
                                      "(in-memory store)"));
}

TEST_CASE("gloo communicator over the in-memory store, no rendezvous server", "[store]") {
  constexpr int kSize = 3;
  MemoryStore store;
  std::vector<std::future<std::vector<float>>> ranks;
  for (int rank = 0; rank < kSize; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&store, rank] {
      hvdrun::runtime::GlooComm comm(store, "test/gloo/g0", rank, kSize, "127.0.0.1", 10s, 10s);
      std::vector<float> v = {static_cast<float>(rank), 1.0F};
      comm.allreduce(v.data(), v.size(), hvdrun::DataType::kFloat32, hvdrun::ReduceOp::kSum);
      return v;
    }));
  }
  for (auto& r : ranks) CHECK(r.get() == std::vector<float>{0.0F + 1.0F + 2.0F, 3.0F});
  CHECK(store.size() > 0);  // the pairs found each other through the store
}
