// Horovod-protocol rendezvous benchmark: N ranks (threads) rendezvous through hvdrun's
// Horovod HTTP server the way Horovod's gloo ranks do, concurrently, and the wall time
// from the first request to the last rank done is reported.
//
//   replay: each rank, for global, local_<host> and cross_<local_rank> in turn, PUTs
//           rank_<r> (its host name) and <r> (an address blob the size Gloo writes),
//           GET-polls every peer's two keys on 404 every 10 ms (Horovod's interval),
//           then DELETEs <r>. One connection per request, as Horovod's client does.
//   gloo:   real Gloo contexts (TCP on loopback) built by Gloo's own connectFullMesh
//           through the same HTTP store, a barrier, then DELETE: what hvd.init() does.
//
// Usage: hvdrun_horovod_rendezvous_bench [ranks=16] [hosts=4] [rounds=3] [replay|gloo|both]
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "compat/horovod_http_server.h"
#include "hostfile/placement.h"
#include "tests/compat/http_test_client.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using hvdrun::compat::testing::http_request;

constexpr auto kPoll = 10ms;  // Horovod's HTTPStore poll interval

std::atomic<std::uint64_t> g_requests{0};
std::atomic<std::uint64_t> g_request_ns{0};

hvdrun::compat::testing::HttpResponse timed(std::uint16_t port, const char* method,
                                            const std::string& target,
                                            const std::string& body = {}) {
  auto t0 = Clock::now();
  auto r = http_request(port, method, target, body);
  g_request_ns += static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  ++g_requests;
  return r;
}

void poll_get(std::uint16_t port, const std::string& target, Clock::time_point deadline) {
  for (;;) {
    auto r = timed(port, "GET", target);
    if (r.status == 200) return;
    if (r.status != 404 || Clock::now() > deadline) {
      throw std::runtime_error("GET " + target + " answered " + std::to_string(r.status));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

void replay_scope(std::uint16_t port, const std::string& scope, const std::string& host, int rank,
                  int size, Clock::time_point deadline) {
  const std::string prefix = "/" + scope + "/";
  if (timed(port, "PUT", prefix + "rank_" + std::to_string(rank), host).status != 200 ||
      timed(port, "PUT", prefix + std::to_string(rank),
            std::string(static_cast<std::size_t>(40 + 96 * size), 'a'))
              .status != 200) {
    throw std::runtime_error("PUT in " + scope + " failed");
  }
  for (int i = 0; i < size; ++i) poll_get(port, prefix + "rank_" + std::to_string(i), deadline);
  for (int i = 0; i < size; ++i) poll_get(port, prefix + std::to_string(i), deadline);
  if (timed(port, "DELETE", prefix + std::to_string(rank)).status != 200) {
    throw std::runtime_error("DELETE in " + scope + " failed");
  }
}

/// Horovod's HTTPStore protocol for Gloo's connectFullMesh.
class HttpStore : public gloo::rendezvous::Store {
 public:
  HttpStore(std::uint16_t port, const std::string& scope)
      : port_(port), prefix_("/" + scope + "/") {}
  void set(const std::string& key, const std::vector<char>& data) override {
    if (timed(port_, "PUT", prefix_ + key, std::string(data.begin(), data.end())).status != 200) {
      throw std::runtime_error("PUT failed");
    }
  }
  std::vector<char> get(const std::string& key) override {
    for (;;) {
      auto r = timed(port_, "GET", prefix_ + key);
      if (r.status == 200) return {r.body.begin(), r.body.end()};
      std::this_thread::sleep_for(kPoll);
    }
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    for (const auto& k : keys) poll_get(port_, prefix_ + k, Clock::now() + t);
  }

 private:
  std::uint16_t port_;
  std::string prefix_;
};

std::shared_ptr<gloo::Context> gloo_scope(std::uint16_t port, const std::string& scope, int rank,
                                          int size, std::shared_ptr<gloo::transport::Device>& dev) {
  HttpStore store(port, scope);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(60s);
  ctx->connectFullMesh(store, dev);
  gloo::BarrierAllToAll(ctx).run();
  if (timed(port, "DELETE", "/" + scope + "/" + std::to_string(rank)).status != 200) {
    throw std::runtime_error("DELETE failed");
  }
  return ctx;
}

double run_once(const hvdrun::hostfile::Placement& placement, bool gloo_mode) {
  hvdrun::compat::HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();
  const int n = placement.size();
  const auto deadline = Clock::now() + 120s;
  std::vector<std::shared_ptr<gloo::Context>> keep(static_cast<std::size_t>(3 * n));
  std::vector<std::future<void>> ranks;
  const auto t0 = Clock::now();
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      const auto& slot = placement.ranks[static_cast<std::size_t>(r)];
      const auto& host = placement.hosts[static_cast<std::size_t>(slot.host_index)].name;
      const std::string local = "local_" + host;
      const std::string cross = "cross_" + std::to_string(slot.local_rank);
      if (gloo_mode) {
        auto dev = gloo::transport::tcp::CreateDevice(gloo::transport::tcp::attr("127.0.0.1"));
        keep[3 * static_cast<std::size_t>(r)] = gloo_scope(port, "global", r, n, dev);
        keep[3 * static_cast<std::size_t>(r) + 1] =
            gloo_scope(port, local, slot.local_rank, slot.local_size, dev);
        keep[3 * static_cast<std::size_t>(r) + 2] =
            gloo_scope(port, cross, slot.cross_rank, slot.cross_size, dev);
      } else {
        replay_scope(port, "global", host, r, n, deadline);
        replay_scope(port, local, host, slot.local_rank, slot.local_size, deadline);
        replay_scope(port, cross, host, slot.cross_rank, slot.cross_size, deadline);
      }
    }));
  }
  for (auto& f : ranks) f.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  auto stats = server.stats();
  if (stats.scopes != 0 || stats.rejected != 0) {
    throw std::runtime_error("server left " + std::to_string(stats.scopes) + " scopes, rejected " +
                             std::to_string(stats.rejected));
  }
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = hvdrun::bench::int_arg(argc, argv, 1, 16);
  const int hosts = hvdrun::bench::int_arg(argc, argv, 2, 4);
  const int rounds = hvdrun::bench::int_arg(argc, argv, 3, 3);
  const std::string mode = argc > 4 ? argv[4] : "both";
  if (ranks < 1 || hosts < 1 || ranks % hosts != 0 || rounds < 1) {
    std::fprintf(stderr,
                 "usage: %s [ranks=16] [hosts=4, dividing ranks] [rounds=3] [replay|gloo|both]\n",
                 argv[0]);
    return 2;
  }
  std::vector<hvdrun::hostfile::HostSlots> host_list;
  for (int h = 0; h < hosts; ++h) host_list.push_back({"host" + std::to_string(h), ranks / hosts});
  auto placement = hvdrun::hostfile::place(host_list, ranks);
  try {
    for (const char* m : {"replay", "gloo"}) {
      if (mode != "both" && mode != m) continue;
      const bool gloo_mode = std::string(m) == "gloo";
      std::vector<double> times;
      g_requests = 0;
      g_request_ns = 0;
      for (int i = 0; i < rounds; ++i) times.push_back(run_once(placement, gloo_mode));
      std::sort(times.begin(), times.end());
      const double per_request_us = g_requests ? static_cast<double>(g_request_ns.load()) /
                                                     static_cast<double>(g_requests) / 1e3
                                               : 0;
      std::printf(
          "horovod-rendezvous %-6s ranks=%d hosts=%d rounds=%d  min %.3f s  median %.3f s  max "
          "%.3f s"
          "  (%llu requests/round, %.0f us per request incl. connect)\n",
          m, ranks, hosts, rounds, times.front(), times[times.size() / 2], times.back(),
          static_cast<unsigned long long>(g_requests / static_cast<std::uint64_t>(rounds)),
          per_request_us);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
