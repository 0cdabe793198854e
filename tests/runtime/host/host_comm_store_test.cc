// The host path over a MemoryStore (runtime/host/host_comm.h): every rank's HostComm takes the
// store as a rendezvous::Store, so a job of threads in one process runs its collectives
// without a rendezvous server. Inside a "host" they go through the shared segment; across
// simulated hosts the leaders' mesh connects over loopback, found through the store.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/core/env.h"
#include "runtime/host/host_comm.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::rendezvous::MemoryStore;
using hvdrun::runtime::Environment;
using hvdrun::runtime::HostComm;
using namespace std::chrono_literals;

namespace {

// Rank `rank` of a job of `hosts` hosts with `local` ranks each, ranks numbered host by host.
Environment rank_env(int rank, int hosts, int local, const std::string& host_path) {
  Environment e;
  e.rank = rank;
  e.size = hosts * local;
  e.local_rank = rank % local;
  e.local_size = local;
  e.cross_rank = rank / local;
  e.cross_size = hosts;
  e.hostname = "node" + std::to_string(rank / local);
  e.secret = std::string(64, 'c');
  e.op_timeout = 20s;
  e.host_path = host_path;
  return e;
}

// What one rank saw.
struct Seen {
  std::string error;  // "" when every collective returned
  std::vector<float> sum;
  double average = -1;
  std::vector<char> broadcast;
  std::vector<std::int32_t> gathered;
  std::string path;
  std::string
      lead_refused;  // where allgather_upto() moves whole blocks: allreduce_agreed()'s error
};

Seen run_rank(MemoryStore& store, const Environment& env) {
  Seen seen;
  try {
    const std::string ip = "127.0.0." + std::to_string(env.cross_rank + 1);
    HostComm comm(&store, "t", env, ip, std::chrono::steady_clock::now() + 20s);
    seen.path = comm.describe();
    seen.sum.resize(1000);
    for (std::size_t i = 0; i < seen.sum.size(); ++i)
      seen.sum[i] = static_cast<float>(env.rank) + static_cast<float>(i);
    comm.allreduce(seen.sum.data(), seen.sum.data(), seen.sum.size(), DataType::kFloat32,
                   ReduceOp::kSum);
    double mine = env.rank;
    comm.allreduce(&mine, &seen.average, 1, DataType::kFloat64, ReduceOp::kAverage);
    seen.broadcast.assign(64, env.rank == env.size - 1 ? 'b' : '-');
    comm.broadcast(seen.broadcast.data(), seen.broadcast.size(), env.size - 1);
    const std::int32_t me = env.rank;
    seen.gathered.resize(static_cast<std::size_t>(env.size));
    comm.allgather(&me, seen.gathered.data(), sizeof me);
    if (!comm.moves_used_bytes()) {
      // Refused before any step: the ranks stay in step for what follows.
      const std::function<bool()> agreed = [] { return true; };
      float x = 1.0F;
      try {
        (void)comm.allreduce_agreed(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum,
                                    {&x, sizeof x, &x, sizeof x, &agreed});
        seen.lead_refused = "accepted";
      } catch (const std::exception& e) {
        seen.lead_refused = e.what();
      }
    }
    if (comm.has_barrier()) comm.barrier();
    comm.farewell(10s);
  } catch (const std::exception& e) {
    seen.error = e.what();
  }
  return seen;
}

// Runs every rank of the job on a thread of its own over one store.
std::vector<Seen> run_job(MemoryStore& store, int hosts, int local,
                          const std::string& host_path = "auto") {
  const int n = hosts * local;
  std::vector<Environment> envs;
  for (int r = 0; r < n; ++r) envs.push_back(rank_env(r, hosts, local, host_path));
  std::vector<std::future<Seen>> ranks;
  for (int r = 0; r < n; ++r)
    ranks.push_back(std::async(std::launch::async, [&store, &envs, r] {
      return run_rank(store, envs[static_cast<std::size_t>(r)]);
    }));
  std::vector<Seen> seen;
  for (auto& f : ranks) seen.push_back(f.get());
  return seen;
}

void check_results(const std::vector<Seen>& seen) {
  const int n = static_cast<int>(seen.size());
  std::vector<std::int32_t> all(seen.size());
  std::iota(all.begin(), all.end(), 0);
  for (int r = 0; r < n; ++r) {
    const auto& s = seen[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << s.error);
    REQUIRE(s.error.empty());
    for (std::size_t i = 0; i < s.sum.size(); i += 97)
      CHECK(s.sum[i] ==
            static_cast<float>(n) * static_cast<float>(i) + static_cast<float>(n * (n - 1)) / 2.0F);
    CHECK(s.average == Approx((n - 1) / 2.0));
    CHECK(s.broadcast == std::vector<char>(64, 'b'));
    CHECK(s.gathered == all);
  }
}

}  // namespace

TEST_CASE("host path over a MemoryStore: one host's ranks share its segment",
          "[runtime][shm][store]") {
  MemoryStore store;
  const auto seen = run_job(store, 1, 3);
  check_results(seen);
  CHECK_THAT(seen[0].path, Catch::Contains("shared memory among 3 local ranks"));
  // Local rank 0 handed the segment out under the host's key.
  CHECK(store.get("t/shm/node0/socket").has_value());
}

TEST_CASE("host path over a MemoryStore: leaders of simulated hosts meet through it",
          "[runtime][shm][frames][store]") {
  MemoryStore store;
  const auto seen = run_job(store, 2, 2);
  check_results(seen);
  CHECK_THAT(seen[0].path, Catch::Contains("among 2 host leaders"));
  CHECK(store.get("t/hosts/0") == "0,1");
  for (const auto& s : seen)
    CHECK_THAT(s.lead_refused,
               Catch::Contains("only where every rank of the group is on one host"));
  CHECK(store.get("t/hosts/1") == "2,3");
  CHECK(store.get("t/shm/node1/socket").has_value());
  // Both leaders passed the final barrier through the store.
  CHECK(store.get("t/leaders/bye/1/done") == "1");
}

TEST_CASE("host path over a MemoryStore: the Gloo path among all ranks", "[runtime][gloo][store]") {
  MemoryStore store;
  const auto seen = run_job(store, 1, 3, "gloo");
  check_results(seen);
  CHECK_THAT(seen[0].path, Catch::Contains("Gloo among all 3 ranks"));
}

TEST_CASE("host path over a MemoryStore: a host whose leader never comes is named",
          "[runtime][frames][store]") {
  MemoryStore store;
  const Environment env = rank_env(0, 2, 1, "auto");
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      HostComm(&store, "t", env, "127.0.0.1", t0 + 500ms),
      Catch::Contains("waiting for the other hosts' leaders") && Catch::Contains("t/hosts/1"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}
