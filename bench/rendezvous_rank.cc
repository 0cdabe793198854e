// The rank side of the rendezvous and allreduce benchmarks, started N times by
// rendezvous_bench / allreduce_bench (or by hvdrun). Links the runtime internals so it
// can time the mesh connect alone. Prints one "result ..." line from rank 0.
//   hvdrun_bench_rank barrier                 init + first barrier
//   hvdrun_bench_rank mesh                    full-mesh connect through our store
//   hvdrun_bench_rank gloo-mesh               the same with Gloo's connectFullMesh
//   hvdrun_bench_rank allreduce BYTES REPS    float32 allreduce, bus bandwidth
//   hvdrun_bench_rank latency BYTES REPS      same, reports microseconds per call
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "hvdrun/hvdrun.h"
#include "runtime/core/env.h"
#include "runtime/world/world.h"

using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Gloo's Store interface over our rendezvous client, to time Gloo's own full-mesh
// connect (every rank publishes all its addresses, every rank reads everyone's).
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(hvdrun::rendezvous::Client& c) : c_(c) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    c_.set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    c_.wait({key}, std::chrono::seconds(60));
    auto v = c_.get(key);
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    c_.wait(keys, std::chrono::seconds(60));
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    c_.wait(keys, t);
  }

 private:
  hvdrun::rendezvous::Client& c_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string mode = argc > 1 ? argv[1] : "barrier";
    auto t0 = Clock::now();
    auto env = hvdrun::runtime::read_environment([](const char* n) { return std::getenv(n); });
    if (mode == "gloo-mesh") env.nccl_mode = "off";
    if (mode == "mesh") env.host_path = "gloo";  // times the Gloo mesh among all ranks
    hvdrun::runtime::World world(env);
    const int rank = env.rank, size = env.size;
    if (mode == "barrier") {
      world.barrier();
      if (rank == 0) std::printf("result init+barrier_ms=%.1f\n", ms_since(t0));
    } else if (mode == "mesh" || mode == "gloo-mesh") {
      world.barrier();
      auto t1 = Clock::now();
      if (mode == "mesh") {
        world.host().world_gloo()->connect(hvdrun::runtime::Topology::kFullMesh, 0);
      } else {
        // Gloo's own path: a rendezvous::Context over a prefixed view of our store.
        hvdrun::rendezvous::ClientOptions o;
        o.host = env.rendezvous_addr;
        o.port = env.rendezvous_port;
        o.secret = env.secret;
        hvdrun::rendezvous::Client c(o);
        StoreAdapter store(c);
        gloo::transport::tcp::attr attr;
        attr.hostname = world.local_address();
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        ctx->connectFullMesh(store, dev);
      }
      world.barrier();
      if (rank == 0) std::printf("result mesh_connect_ms=%.1f\n", ms_since(t1));
    } else if (mode == "allreduce" || mode == "latency") {
      std::size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64u << 20;
      int reps = hvdrun::bench::int_arg(argc, argv, 3, 5);
      std::vector<float> buf(bytes / 4, 1.0f);
      for (int i = 0; i < 2; ++i)  // warm-up: connects the pairs, faults the pages in
        world.host().allreduce(buf.data(), buf.data(), buf.size(), hvdrun::DataType::kFloat32,
                               hvdrun::ReduceOp::kSum);
      world.barrier();
      auto t1 = Clock::now();
      for (int i = 0; i < reps; ++i)
        world.host().allreduce(buf.data(), buf.data(), buf.size(), hvdrun::DataType::kFloat32,
                               hvdrun::ReduceOp::kSum);
      double per = ms_since(t1) / reps;
      double busbw = 2.0 * (size - 1) / size * static_cast<double>(bytes) / (per / 1e3) / 1e9;
      if (rank == 0) {
        if (mode == "latency")
          std::printf("result allreduce_us=%.1f bytes=%zu np=%d\n", per * 1e3, bytes, size);
        else
          std::printf("result allreduce_ms=%.2f busbw_GBps=%.3f bytes=%zu np=%d\n", per, busbw,
                      bytes, size);
      }
    } else {
      std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench rank: %s\n", e.what());
    return 1;
  }
}
