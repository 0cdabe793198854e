// The in-memory Store, and runtime code over it without a rendezvous server: threads
// standing in for ranks build a GlooComm through one MemoryStore and reduce. Gloo's pairs
// prove the job secret before they carry data: a peer with another secret, or whatever
// reaches a pair's listening port first, is refused with an error naming the pair.
#include <netinet/in.h>
#include <sys/socket.h>

#include <gloo/transport/tcp/address.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "rendezvous/memory_store.h"
#include "runtime/gloo/gloo_comm.h"

using hvdrun::rendezvous::MemoryStore;
using hvdrun::rendezvous::Store;
using hvdrun::rendezvous::TimeoutError;
using namespace std::chrono_literals;

namespace {

const std::string kSecret(64, 'a');

// What GlooComm::connect threw, or empty when it returned.
std::string connect_error(hvdrun::runtime::GlooComm& comm) {
  try {
    comm.connect(hvdrun::runtime::Topology::kRing, 0);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

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
      hvdrun::runtime::GlooComm comm(store, "test/gloo/g0", rank, kSize, "127.0.0.1", kSecret, 10s,
                                     10s);
      std::vector<float> v = {static_cast<float>(rank), 1.0F};
      comm.allreduce(v.data(), v.size(), hvdrun::DataType::kFloat32, hvdrun::ReduceOp::kSum);
      return v;
    }));
  }
  for (auto& r : ranks) CHECK(r.get() == std::vector<float>{0.0F + 1.0F + 2.0F, 3.0F});
  CHECK(store.size() > 0);  // the pairs found each other through the store
}

TEST_CASE("gloo pairs: a rank with another job's secret is refused by its peers",
          "[store][security]") {
  constexpr int kSize = 3;
  MemoryStore store;
  std::vector<std::future<std::string>> ranks;
  for (int rank = 0; rank < kSize; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&store, rank] {
      const std::string secret = rank == 2 ? std::string(64, 'b') : kSecret;
      hvdrun::runtime::GlooComm comm(store, "test/gloo/g1", rank, kSize, "127.0.0.1", secret, 5s,
                                     5s);
      return connect_error(comm);
    }));
  }
  std::vector<std::string> errors;
  for (auto& r : ranks) errors.push_back(r.get());
  INFO(errors[0] << "\n" << errors[1] << "\n" << errors[2]);
  // Ranks 0 and 1 trust each other; each refuses rank 2, and rank 2 refuses both. No rank
  // closes its pairs before it has checked all of them, so no honest rank is blamed.
  CHECK_THAT(errors[0],
             Catch::Contains("rank 0's connection for rank 2 did not prove the job secret"));
  CHECK_THAT(errors[1],
             Catch::Contains("rank 1's connection for rank 2 did not prove the job secret"));
  CHECK_THAT(errors[2], Catch::Contains("did not prove the job secret"));
  for (const auto& e : errors) CHECK_THAT(e, !Catch::Contains("sent no proof"));
}

TEST_CASE("gloo pairs: whatever reaches a pair's port before the peer is refused, never used",
          "[store][security]") {
  MemoryStore store;
  // Rank 1's address (127.0.0.2) is the larger: it dials, rank 0 listens.
  auto rank0 = std::async(std::launch::async, [&store] {
    hvdrun::runtime::GlooComm comm(store, "test/gloo/g2", 0, 2, "127.0.0.1", kSecret, 2s, 10s);
    return connect_error(comm);
  });
  // A stranger reads the address (on a job host it would scan /proc/net/tcp) and connects
  // first, then says nothing.
  REQUIRE(store.wait_for({"test/gloo/g2/addr/a/0/1"}, 10s).empty());
  const auto bytes = *store.get("test/gloo/g2/addr/a/0/1");
  const gloo::transport::tcp::Address address(std::vector<char>(bytes.begin(), bytes.end()));
  const auto& ss = address.getSockaddr();
  hvdrun::UniqueFd stranger(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::connect(stranger.get(), reinterpret_cast<const sockaddr*>(&ss), sizeof(sockaddr_in)) ==
          0);
  auto rank1 = std::async(std::launch::async, [&store] {
    hvdrun::runtime::GlooComm comm(store, "test/gloo/g2", 1, 2, "127.0.0.2", kSecret, 2s, 10s);
    return connect_error(comm);
  });
  const std::string e0 = rank0.get();
  const std::string e1 = rank1.get();
  INFO("rank 0: " << e0 << "\nrank 1: " << e1);
  CHECK_THAT(e0, Catch::Contains("rank 0's connection for rank 1 sent no nonce") &&
                     Catch::Contains("something other than rank 1 of this job"));
  CHECK_FALSE(e1.empty());  // its own dial found the port taken
}
