// The NCCL bootstrap over a MemoryStore (runtime/nccl/nccl_bootstrap.h): the unique ids are
// opaque bytes to it, so the exchange is tested without a GPU, NCCL or a rendezvous
// server. Threads stand in for ranks.
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/nccl/nccl_bootstrap.h"

using hvdrun::rendezvous::MemoryStore;
using namespace std::chrono_literals;

TEST_CASE("NCCL unique id is published by rank 0 and read through the store",
          "[runtime][nccl][store]") {
  MemoryStore store;
  const std::string id(128, '\x5a');
  SECTION("id reaches every rank") {
    std::vector<std::future<std::string>> others;
    for (int r = 1; r < 4; ++r)
      others.push_back(std::async(std::launch::async, [&, r] {
        return hvdrun::runtime::exchange_unique_id(store, "g0/nccl/world/id", r, nullptr, 5s);
      }));
    CHECK(hvdrun::runtime::exchange_unique_id(
              store, "g0/nccl/world/id", 0, [&] { return std::string(id); }, 5s) == id);
    for (auto& f : others) CHECK(f.get() == id);
    CHECK(store.get("g0/nccl/world/id") == "id:" + id);
  }
  SECTION("the id is opaque: every byte value, NUL included, arrives unchanged") {
    std::string bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
    auto waiter = std::async(std::launch::async, [&] {
      return hvdrun::runtime::exchange_unique_id(store, "k", 3, nullptr, 5s);
    });
    CHECK(hvdrun::runtime::exchange_unique_id(
              store, "k", 0, [&] { return bytes; }, 5s) == bytes);
    CHECK(waiter.get() == bytes);
  }
  SECTION("rank 0's failure reaches every rank at once") {
    auto waiter = std::async(std::launch::async, [&] {
      return hvdrun::runtime::exchange_unique_id(store, "k", 1, nullptr, 20s);
    });
    CHECK_THROWS_WITH(
        hvdrun::runtime::exchange_unique_id(
            store, "k", 0, []() -> std::string { throw std::runtime_error("no CUDA device"); }, 5s),
        Catch::Contains("no CUDA device"));
    REQUIRE(waiter.wait_for(3s) == std::future_status::ready);
    CHECK_THROWS_WITH(waiter.get(), Catch::Contains("rank 0 could not create") &&
                                        Catch::Contains("no CUDA device"));
  }
  SECTION("a missing rank 0 is a timeout naming the key") {
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(
        hvdrun::runtime::exchange_unique_id(store, "g0/nccl/world/id", 2, nullptr, 300ms),
        Catch::Contains("rank 0 to publish") && Catch::Contains("g0/nccl/world/id"));
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  }
}

TEST_CASE("NCCL scalable init: one id per 128 ranks, owners spread evenly",
          "[runtime][nccl][store]") {
  using hvdrun::runtime::nccl_id_count;
  using hvdrun::runtime::nccl_id_index;
  using hvdrun::runtime::nccl_id_owner;
  CHECK(nccl_id_count(1) == 1);
  CHECK(nccl_id_count(8) == 1);
  CHECK(nccl_id_count(128) == 1);
  CHECK(nccl_id_count(129) == 2);
  CHECK(nccl_id_count(1024) == 8);
  CHECK(nccl_id_count(16384) == 128);
  CHECK(nccl_id_count(98304) == 768);
  CHECK(nccl_id_count(0) == 1);
  // 1,024 ranks, 8 per host: 8 ids owned by ranks 0, 128, ... -- on hosts 0, 16, 32, ...
  for (int i = 0; i < 8; ++i) CHECK(nccl_id_owner(i, 1024, 8) == 128 * i);
  // An uneven size: 300 ranks, 3 ids, owners 0, 100, 200.
  CHECK(nccl_id_owner(1, 300, 3) == 100);
  CHECK(nccl_id_owner(2, 300, 3) == 200);
  // Every id has exactly one owner, owners are distinct, and nccl_id_index inverts it.
  for (int size : {1, 2, 7, 127, 128, 129, 255, 300, 1000, 1024, 4097, 16384}) {
    const int count = nccl_id_count(size);
    int owners = 0;
    for (int r = 0; r < size; ++r) {
      const int i = nccl_id_index(r, size, count);
      if (i < 0) continue;
      ++owners;
      CHECK(nccl_id_owner(i, size, count) == r);
    }
    CHECK(owners == count);
    CHECK(nccl_id_index(0, size, count) == 0);
  }
}

TEST_CASE("NCCL unique ids of the scalable init travel through the store",
          "[runtime][nccl][store]") {
  MemoryStore store;
  constexpr int kSize = 6;  // 3 ids (as if 2 ranks per id): owners 0, 2, 4
  constexpr int kIds = 3;
  auto make = [](int r) { return [r] { return "id-of-" + std::to_string(r); }; };
  SECTION("every rank gets every id, in order") {
    std::vector<std::future<std::vector<std::string>>> ranks;
    for (int r = 0; r < kSize; ++r)
      ranks.push_back(std::async(std::launch::async, [&, r] {
        return hvdrun::runtime::exchange_unique_ids(store, "g0/nccl/world/id", r, kSize, kIds,
                                                    make(r), 10s);
      }));
    const std::vector<std::string> want = {"id-of-0", "id-of-2", "id-of-4"};
    for (auto& f : ranks) CHECK(f.get() == want);
    CHECK(store.get("g0/nccl/world/id") == "id:id-of-0");
    CHECK(store.get("g0/nccl/world/id/2") == "id:id-of-4");
  }
  SECTION("an owner's failure reaches every rank at once, naming it") {
    std::vector<std::future<std::string>> others;
    for (int r : {0, 1, 4})
      others.push_back(std::async(std::launch::async, [&, r]() -> std::string {
        try {
          hvdrun::runtime::exchange_unique_ids(store, "k", r, kSize, kIds, make(r), 20s);
        } catch (const std::exception& e) {
          return e.what();
        }
        return "no error";
      }));
    CHECK_THROWS_WITH(hvdrun::runtime::exchange_unique_ids(
                          store, "k", 2, kSize, kIds,
                          []() -> std::string { throw std::runtime_error("no GPU"); }, 5s),
                      Catch::Contains("rank 2 could not create its NCCL unique id: no GPU"));
    for (auto& f : others) {
      REQUIRE(f.wait_for(5s) == std::future_status::ready);
      auto what = f.get();
      CHECK_THAT(what, Catch::Contains("rank 2 could not create NCCL unique id 1") &&
                           Catch::Contains("no GPU"));
    }
  }
  SECTION("an owner that never publishes is a timeout naming its key") {
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(
        hvdrun::runtime::exchange_unique_ids(store, "k", 0, kSize, kIds, make(0), 300ms),
        Catch::Contains("'k/1'") && Catch::Contains("'k/2'"));
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  }
}
