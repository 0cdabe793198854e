// 64 MiB allreduce between two "hosts" on loopback (127.0.0.1 and 127.0.0.2), the way host
// leaders run it: Gloo's unauthenticated ring (the path before frames were MAC'd) and the
// authenticated FrameComm, side by side in one run, alternating rounds so both see the
// same machine load. Each rank is a thread of this process with its own sockets.
// Usage: hvdrun_interhost_bench [MiB, default 64] [iterations per round, default 10] [rounds,
// default 3]
//        hvdrun_interhost_bench latency [hosts, default 4] [calls per round, default 200]
//                               [rounds, default 5]: 8-byte and 4 KiB allreduce latency
//        hvdrun_interhost_bench frames [MiB, default 64] [hosts, default 2] [calls, default
//                               10]: FrameComm alone, one line for a script to compare
//                               against another build (bench/interhost.sh vs)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/frames/frame_comm.h"
#include "runtime/gloo/gloo_comm.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kSecret(64, 'b');

// This process's CPU seconds (both ranks, user and system).
double process_cpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const auto sec = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

struct Result {
  double seconds;  // per allreduce, median of the calls, as rank 0 measured it
  double cpu;      // CPU seconds per allreduce, both ranks together
};

template <typename Comm>
Result run(const std::string& prefix, std::size_t count, int iters, int hosts = 2) {
  hvdrun::rendezvous::MemoryStore store;
  auto body = [&](int rank) {
    Comm comm(store, prefix, rank, hosts, "127.0.0." + std::to_string(rank + 1), kSecret, 60s, 60s);
    std::vector<float> v(count, 1.0F);
    std::vector<double> times;
    double want = 1;
    for (int i = -2; i < iters; ++i) {  // two warm-up calls connect and fault pages in
      const auto t0 = Clock::now();
      comm.allreduce(v.data(), count, hvdrun::DataType::kFloat32, hvdrun::ReduceOp::kSum);
      if (i >= 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      want *= hosts;  // every call multiplies by the number of hosts
    }
    if (std::abs(v[count / 2] - want) > 1e-5 * want) std::abort();
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const double cpu0 = process_cpu();
  std::vector<std::future<double>> others;
  for (int r = 1; r < hosts; ++r) others.push_back(std::async(std::launch::async, body, r));
  const double t = body(0);
  for (auto& o : others) o.get();
  return {t, (process_cpu() - cpu0) / (iters + 2)};
}

// Latency of a small allreduce among `hosts` ranks: the median of `iters` calls on rank 0
// (each on fresh ones, checked afterwards), after two warm-up calls that connect.
template <typename Comm>
double latency(const std::string& prefix, int hosts, std::size_t count, int iters) {
  hvdrun::rendezvous::MemoryStore store;
  auto body = [&](int rank) {
    Comm comm(store, prefix, rank, hosts, "127.0.0." + std::to_string(rank + 1), kSecret, 60s, 60s);
    std::vector<float> v(count);
    std::vector<double> times;
    for (int i = -2; i < iters; ++i) {
      std::fill(v.begin(), v.end(), 1.0F);
      const auto t0 = Clock::now();
      comm.allreduce(v.data(), count, hvdrun::DataType::kFloat32, hvdrun::ReduceOp::kSum);
      if (i >= 0) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      if (v[count - 1] != static_cast<float>(hosts)) std::abort();
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  std::vector<std::future<double>> others;
  for (int r = 1; r < hosts; ++r) others.push_back(std::async(std::launch::async, body, r));
  const double t = body(0);
  for (auto& o : others) o.get();
  return t;
}

// `latency [hosts] [calls] [rounds]`: 8-byte and 4 KiB allreduce latency over Gloo and
// frames, alternating rounds; prints the median round of each.
int latency_main(int argc, char** argv) {
  const int hosts = argc > 2 ? static_cast<int>(std::strtol(argv[2], nullptr, 10)) : 4;
  const int iters = argc > 3 ? static_cast<int>(std::strtol(argv[3], nullptr, 10)) : 200;
  const int rounds = argc > 4 ? static_cast<int>(std::strtol(argv[4], nullptr, 10)) : 5;
  if (hosts < 2 || hosts > 200 || iters < 1 || rounds < 1) {
    std::fprintf(stderr, "hvdrun_interhost_bench latency: hosts 2..200, calls and rounds >= 1\n");
    return 2;
  }
  const auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("allreduce latency, %d hosts on loopback, median of %d rounds x %d calls\n", hosts,
              rounds, iters);
  for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}}) {
    std::vector<double> gloo, frames;
    for (int r = 0; r < rounds; ++r) {
      const std::string tag = std::to_string(bytes) + "/" + std::to_string(r);
      gloo.push_back(
          latency<hvdrun::runtime::GlooComm>("l/gloo/" + tag, hosts, bytes / sizeof(float), iters));
      frames.push_back(latency<hvdrun::runtime::FrameComm>("l/frames/" + tag, hosts,
                                                           bytes / sizeof(float), iters));
    }
    std::printf("%5zu bytes: gloo (no MAC) %8.1f us   frames (GMAC per frame) %8.1f us\n", bytes,
                median(gloo) * 1e6, median(frames) * 1e6);
  }
  return 0;
}

// `frames [MiB] [hosts] [calls]`: one run of FrameComm's allreduce alone, printed as one
// line of key=value pairs (bench/interhost.sh vs runs it from two builds in turn).
int frames_main(int argc, char** argv) {
  const std::size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64;
  const int hosts = argc > 3 ? static_cast<int>(std::strtol(argv[3], nullptr, 10)) : 2;
  const int iters = argc > 4 ? static_cast<int>(std::strtol(argv[4], nullptr, 10)) : 10;
  if (mib < 1 || hosts < 2 || hosts > 200 || iters < 1) {
    std::fprintf(stderr, "hvdrun_interhost_bench frames: MiB >= 1, hosts 2..200, calls >= 1\n");
    return 2;
  }
  const std::size_t count = (mib << 20) / sizeof(float);
  const auto r = run<hvdrun::runtime::FrameComm>("b/frames", count, iters, hosts);
  std::printf("frames hosts=%d mib=%zu calls=%d ms=%.3f cpu_ms=%.3f\n", hosts, mib, iters,
              r.seconds * 1e3, r.cpu * 1e3);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "latency") return latency_main(argc, argv);
  if (argc > 1 && std::string(argv[1]) == "frames") return frames_main(argc, argv);
  const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  const int iters = argc > 2 ? static_cast<int>(std::strtol(argv[2], nullptr, 10)) : 10;
  const int rounds = argc > 3 ? static_cast<int>(std::strtol(argv[3], nullptr, 10)) : 3;
  const std::size_t count = (mib << 20) / sizeof(float);
  std::vector<double> gloo, frames, gloo_cpu, frames_cpu;
  for (int r = 0; r < rounds; ++r) {
    const auto a = run<hvdrun::runtime::GlooComm>("b/gloo/" + std::to_string(r), count, iters);
    const auto b = run<hvdrun::runtime::FrameComm>("b/frames/" + std::to_string(r), count, iters);
    gloo.push_back(a.seconds);
    gloo_cpu.push_back(a.cpu);
    frames.push_back(b.seconds);
    frames_cpu.push_back(b.cpu);
  }
  const auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double bytes = static_cast<double>(count * sizeof(float));
  const double g = median(gloo), f = median(frames);
  const double gc = median(gloo_cpu), fc = median(frames_cpu);
  std::printf("allreduce %zu MiB, 2 hosts on loopback, median of %d rounds x %d calls\n", mib,
              rounds, iters);
  std::printf("gloo (no MAC)           %7.1f ms  %6.2f GB/s  CPU %6.1f ms per call\n", g * 1e3,
              bytes / g / 1e9, gc * 1e3);
  std::printf("frames (GMAC per frame) %7.1f ms  %6.2f GB/s  CPU %6.1f ms per call\n", f * 1e3,
              bytes / f / 1e9, fc * 1e3);
  std::printf("authenticated / gloo bandwidth: %.1f %%\n", 100.0 * g / f);
  return 0;
}
