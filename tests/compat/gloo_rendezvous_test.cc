// Real Gloo ranks (threads, TCP on loopback) rendezvous through the Horovod HTTP server
// exactly as Horovod's GlooContext does: a store that PUTs, GET-polls on 404 every 10 ms
// and DELETEs its rank when done; global, local_<host> and cross_<local_rank> contexts
// in turn, each followed by a barrier before finishing the scope; then an allreduce.
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "compat/horovod_http_server.h"
#include "hostfile/placement.h"
#include "tests/compat/http_test_client.h"

namespace hvdrun::compat {
namespace {

using namespace std::chrono_literals;

/// The protocol side of Horovod's HTTPStore, written against our test client.
class HorovodStyleStore : public gloo::rendezvous::Store {
 public:
  HorovodStyleStore(std::uint16_t port, std::string scope, int rank)
      : port_(port), prefix_("/" + std::move(scope) + "/"), rank_(rank) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    auto r =
        testing::http_request(port_, "PUT", prefix_ + key, std::string(data.begin(), data.end()));
    if (r.status != 200) throw std::runtime_error("PUT " + prefix_ + key + " failed");
  }
  // Gloo (since 2022) reads the peers' "rank_<r>" host names with get() alone and
  // expects it to block as its own stores do; poll on 404 here as wait() does.
  std::vector<char> get(const std::string& key) override {
    const auto deadline = std::chrono::steady_clock::now() + kDefaultTimeout;
    for (;;) {
      auto r = testing::http_request(port_, "GET", prefix_ + key);
      if (r.status == 200) return {r.body.begin(), r.body.end()};
      if (r.status != 404 || std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("GET " + prefix_ + key + " answered " + std::to_string(r.status));
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& key : keys) {
      while (testing::http_request(port_, "GET", prefix_ + key).status == 404) {
        if (std::chrono::steady_clock::now() > deadline) {
          throw std::runtime_error("wait for " + prefix_ + key + " timed out");
        }
        std::this_thread::sleep_for(10ms);  // Horovod's poll interval
      }
    }
  }
  void finalize() {
    auto r = testing::http_request(port_, "DELETE", prefix_ + std::to_string(rank_));
    if (r.status != 200) throw std::runtime_error("DELETE " + prefix_ + " failed");
  }

 private:
  std::uint16_t port_;
  std::string prefix_;
  int rank_;
};

std::shared_ptr<gloo::rendezvous::Context> rendezvous(
    std::uint16_t port, const std::string& scope, int rank, int size,
    std::shared_ptr<gloo::transport::Device>& dev) {
  HorovodStyleStore store(port, scope, rank);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(20s);
  context->connectFullMesh(store, dev);
  gloo::BarrierAllToAll(context).run();
  store.finalize();
  return context;
}

}  // namespace

TEST_CASE("Gloo's own full-mesh rendezvous completes through the Horovod HTTP server") {
  auto placement = hostfile::place({{"hostA", 2}, {"hostB", 2}}, 4);
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();

  // Contexts outlive every rank's last collective: a rank that tears its pairs down
  // while a peer still reads from them makes that peer fail, which is not under test.
  struct Outcome {
    std::vector<float> values;
    std::vector<std::shared_ptr<gloo::Context>> contexts;
  };
  std::vector<std::future<Outcome>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      const auto& slot = placement.ranks[static_cast<std::size_t>(r)];
      const auto& host = placement.hosts[static_cast<std::size_t>(slot.host_index)].name;
      gloo::transport::tcp::attr attr("127.0.0.1");
      auto dev = gloo::transport::tcp::CreateDevice(attr);
      auto global = rendezvous(port, "global", r, 4, dev);
      auto local = rendezvous(port, "local_" + host, slot.local_rank, slot.local_size, dev);
      auto cross = rendezvous(port, "cross_" + std::to_string(slot.local_rank), slot.cross_rank,
                              slot.cross_size, dev);
      std::vector<float> data = {static_cast<float>(r + 1), 10.0f * static_cast<float>(r)};
      std::vector<float*> ptrs = {data.data()};
      gloo::AllreduceRing<float>(global, ptrs, static_cast<int>(data.size())).run();
      std::vector<float> local_sum = {1.0f};
      std::vector<float*> lp = {local_sum.data()};
      gloo::AllreduceRing<float>(local, lp, 1).run();
      std::vector<float> cross_sum = {static_cast<float>(r)};
      std::vector<float*> cp = {cross_sum.data()};
      gloo::AllreduceRing<float>(cross, cp, 1).run();
      return Outcome{{data[0], data[1], local_sum[0], cross_sum[0]}, {global, local, cross}};
    }));
  }
  std::vector<Outcome> outcomes;
  for (auto& f : ranks) outcomes.push_back(f.get());
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    const auto& got = outcomes[static_cast<std::size_t>(r)].values;
    CHECK(got[0] == 10.0f);                       // 1+2+3+4
    CHECK(got[1] == 60.0f);                       // 10*(0+1+2+3)
    CHECK(got[2] == 2.0f);                        // two ranks per host
    CHECK(got[3] == (r % 2 == 0 ? 2.0f : 4.0f));  // cross_0 = {0,2}, cross_1 = {1,3}
  }
  auto stats = server.stats();
  CHECK(stats.scopes == 0);
  CHECK(stats.scopes_cleared == 5);
  CHECK(stats.rejected == 0);
}

}  // namespace hvdrun::compat
