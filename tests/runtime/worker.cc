// A rank program for the runtime tests: linked against libhvdrun.so like a user's
// program, started N times by job_harness with the HVDRUN_* environment. The scenario
// (argv[1]) says what to check; the exit code says whether it held (0 = yes).
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "hvdrun/hvdrun_c.h"
#include "tests/runtime/collective_checks.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun_test::fail;

namespace {

void check_all_allreduce() {
  hvdrun_test::check_every_dtype(
      [](const void* send, void* out, std::size_t count, DataType dt, ReduceOp op) {
        if (hvdrun_allreduce(send, out, count, static_cast<hvdrun_dtype>(dt),
                             static_cast<hvdrun_op>(op)) != 0)
          return std::string(hvdrun_last_error());
        return std::string();
      },
      {1, 7, 40000});
}

// Above the algorithm cache's 16 MiB limit collectives run on the caller's buffer.
void check_large() {
  const int n = hvdrun::size(), r = hvdrun::rank();
  const std::size_t count = 4500000;  // 18 MB of float32
  std::vector<float> buf(count);
  for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((r + i) % 5);
  hvdrun::allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  for (std::size_t i = 0; i < count; i += 997) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += static_cast<float>((q + i) % 5);
    if (buf[i] != want) {
      fail("large allreduce wrong at " + std::to_string(i));
      break;
    }
  }
  for (std::size_t i = 0; i < count; ++i) buf[i] = r == 0 ? static_cast<float>(i % 1000) : -1.0f;
  hvdrun::broadcast(buf.data(), count, DataType::kFloat32, 0);
  for (std::size_t i = 0; i < count; i += 991)
    if (buf[i] != static_cast<float>(i % 1000)) {
      fail("large broadcast wrong at " + std::to_string(i));
      break;
    }
}

void check_broadcast_allgather() {
  hvdrun_test::check_broadcast(
      [](void* buf, std::size_t count, DataType dt, int root) {
        if (hvdrun_broadcast(buf, count, static_cast<hvdrun_dtype>(dt), root) != 0)
          return std::string(hvdrun_last_error());
        return std::string();
      },
      1000);
  for (std::size_t count : {std::size_t{3}, std::size_t{50000}})
    hvdrun_test::check_allgather(
        [](const void* send, void* recv, std::size_t n, DataType dt) {
          if (hvdrun_allgather(send, recv, n, static_cast<hvdrun_dtype>(dt)) != 0)
            return std::string(hvdrun_last_error());
          return std::string();
        },
        count);
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "collectives";
  if (hvdrun_init() != 0) {
    std::fprintf(stderr, "init failed: %s\n", hvdrun_last_error());
    return 3;
  }
  if (scenario == "barrier") {
    for (int i = 0; i < 3; ++i)
      if (hvdrun_barrier() != 0) {
        std::fprintf(stderr, "barrier failed: %s\n", hvdrun_last_error());
        return 4;
      }
  } else if (scenario == "collectives") {
    if (hvdrun_rank() < 0 || hvdrun_size() < 1 || hvdrun_local_rank() < 0)
      fail("rank/size queries failed");
    check_all_allreduce();
    check_broadcast_allgather();
    if (hvdrun::size() <= 4) check_large();
    if (hvdrun_barrier() != 0) fail(std::string("barrier: ") + hvdrun_last_error());
  } else if (scenario == "stop-after-init") {
    // Rank 1 hangs (stops itself) after init; the others must not wait for ever.
    if (hvdrun::rank() == 1) ::raise(SIGSTOP);
    if (hvdrun_barrier() != 0) {
      std::fprintf(stderr, "barrier failed: %s\n", hvdrun_last_error());
      return 4;
    }
  } else if (scenario == "exit-after-init") {
    // Leaves without taking part in the next collective.
    if (hvdrun::rank() == 1) return 0;
    int x = 1;
    if (hvdrun_allreduce(&x, &x, 1, HVDRUN_INT32, HVDRUN_SUM) == 0) {
      std::fprintf(stderr, "allreduce succeeded without rank 1\n");
      return 1;
    }
    std::fprintf(stderr, "allreduce failed: %s\n", hvdrun_last_error());
    return 5;
  }
  const int me = hvdrun_rank();
  hvdrun_shutdown();
  if (hvdrun_test::failures() != 0) {
    std::fprintf(stderr, "rank %d: %d checks failed\n", me, hvdrun_test::failures());
    return 1;
  }
  return 0;
}
