// The README's first program: every rank contributes rank+1, all of them sum with
// allreduce, each prints what it got and whether that is right; rank 0 sums up.
//   hvdrun -np 4 -H localhost:4 build/examples/allreduce_demo [FLOATS=1048576]
// (a small FLOATS, e.g. 1024, makes it a start-up test: hvdrun -np 512 ... 1024)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

int main(int argc, char** argv) {
  try {
    std::size_t count = std::size_t{1} << 20;  // 4 MiB of float32
    if (argc > 1) {
      char* end = nullptr;
      count = std::strtoull(argv[1], &end, 10);
      if (end == argv[1] || *end != '\0' || count == 0) {
        std::fprintf(stderr, "allreduce_demo: FLOATS '%s' is not a positive whole number\n",
                     argv[1]);
        return 2;
      }
    }
    hvdrun::init();
    const int rank = hvdrun::rank(), size = hvdrun::size();

    std::vector<float> data(count, static_cast<float>(rank + 1));
    // Warm-up: the first collective of a shape connects the pairs it needs.
    std::vector<float> warm(count, 0.0f);
    hvdrun::allreduce(warm.data(), warm.data(), count, hvdrun::DataType::kFloat32,
                      hvdrun::ReduceOp::kSum);
    hvdrun::barrier();
    auto t0 = std::chrono::steady_clock::now();
    hvdrun::allreduce(data.data(), data.data(), count, hvdrun::DataType::kFloat32,
                      hvdrun::ReduceOp::kSum);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    const float expected = static_cast<float>(size) * (size + 1) / 2;
    std::int32_t ok = 1;
    for (float v : data) ok &= (v == expected);
    std::printf("rank %d/%d (local %d/%d): allreduce sum of %zu floats = %g, expected %g: %s\n",
                rank, size, hvdrun::local_rank(), hvdrun::local_size(), count,
                static_cast<double>(data[0]), static_cast<double>(expected), ok ? "ok" : "WRONG");

    // Agreement and host count, with two more collectives.
    std::int32_t all_ok = ok;
    hvdrun::allreduce(&all_ok, 1, hvdrun::ReduceOp::kMin);
    std::int32_t hosts = hvdrun::local_rank() == 0 ? 1 : 0;
    hvdrun::allreduce(&hosts, 1, hvdrun::ReduceOp::kSum);
    if (rank == 0) {
      double bytes = count * sizeof(float);
      double busbw = size > 1 ? 2.0 * (size - 1) / size * bytes / (ms / 1e3) / 1e9 : 0;
      std::printf(
          "allreduce_demo: %d ranks on %d host(s): %s; %.1f ms for %.0f MiB "
          "(bus bandwidth %.2f GB/s)\n",
          size, hosts, all_ok ? "all ranks agree" : "MISMATCH", ms, bytes / (1 << 20), busbw);
    }
    hvdrun::shutdown();
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_demo: %s\n", e.what());
    return 1;
  }
}
