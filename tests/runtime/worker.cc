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
#include "runtime/reduce.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::runtime::BFloat16;
using hvdrun::runtime::Half;

namespace {

int g_failures = 0;

void fail(const std::string& what) {
  if (g_failures++ < 10) std::fprintf(stderr, "rank %d: %s\n", hvdrun::rank(), what.c_str());
}

// Input element i of rank r for op `op`: small integers so every dtype is exact.
double input(int r, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return static_cast<double>((r + i) % 2 + 1);
  return static_cast<double>((r + i) % 3 + 1);
}

template <typename T>
T make(double v) {
  if constexpr (std::is_same_v<T, Half>)
    return hvdrun::runtime::to_half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>)
    return hvdrun::runtime::to_bfloat16(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <typename T>
double value(T x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return hvdrun::runtime::to_float(x);
  else
    return static_cast<double>(x);
}

template <typename T>
double expected(int n, std::size_t i, ReduceOp op) {
  double acc = input(0, i, op);
  for (int r = 1; r < n; ++r) {
    double v = input(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op == ReduceOp::kAverage) {
    if constexpr (std::is_integral_v<T>)
      acc = std::trunc(acc / n);
    else
      acc = acc / n;
  }
  return acc;
}

template <typename T>
void check_allreduce(DataType dt, const char* name, std::size_t count) {
  const int n = hvdrun::size(), r = hvdrun::rank();
  double tol = std::is_integral_v<T> ? 0 : (sizeof(T) == 2 ? 1e-2 : 1e-6);
  for (auto op :
       {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    for (bool in_place : {true, false}) {
      std::vector<T> send(count), recv(count, make<T>(-7));
      for (std::size_t i = 0; i < count; ++i) send[i] = make<T>(input(r, i, op));
      auto before = send;
      T* out = in_place ? send.data() : recv.data();
      if (hvdrun_allreduce(send.data(), out, count, static_cast<hvdrun_dtype>(dt),
                           static_cast<hvdrun_op>(op)) != 0) {
        fail(std::string("allreduce failed: ") + hvdrun_last_error());
        return;
      }
      for (std::size_t i = 0; i < count; ++i) {
        double want = expected<T>(n, i, op);
        double got = value(out[i]);
        if (std::fabs(got - want) > tol * std::max(1.0, std::fabs(want))) {
          fail(std::string(name) + " op " + std::to_string(static_cast<int>(op)) +
               (in_place ? " in place" : " out of place") + " count " + std::to_string(count) +
               " element " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
               std::to_string(want));
          break;
        }
      }
      if (!in_place && std::memcmp(before.data(), send.data(), count * sizeof(T)) != 0)
        fail(std::string(name) + ": out-of-place allreduce modified its input");
    }
  }
}

void check_all_allreduce() {
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{40000}}) {
    check_allreduce<std::int32_t>(DataType::kInt32, "int32", count);
    check_allreduce<std::int64_t>(DataType::kInt64, "int64", count);
    check_allreduce<float>(DataType::kFloat32, "float32", count);
    check_allreduce<double>(DataType::kFloat64, "float64", count);
    check_allreduce<Half>(DataType::kFloat16, "float16", count);
    check_allreduce<BFloat16>(DataType::kBFloat16, "bfloat16", count);
    check_allreduce<std::uint8_t>(DataType::kUInt8, "uint8", count);
  }
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
  const int n = hvdrun::size(), r = hvdrun::rank();
  for (int root : {0, n - 1}) {
    std::vector<double> buf(1000);
    for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = r == root ? i * 0.5 + root : -1;
    hvdrun::broadcast(buf.data(), buf.size(), DataType::kFloat64, root);
    for (std::size_t i = 0; i < buf.size(); ++i)
      if (buf[i] != i * 0.5 + root) {
        fail("broadcast from " + std::to_string(root) + " wrong at " + std::to_string(i));
        break;
      }
  }
  for (std::size_t count : {std::size_t{3}, std::size_t{50000}}) {
    std::vector<std::int32_t> mine(count), all(count * static_cast<std::size_t>(n), -1);
    for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<std::int32_t>(r * 100000 + i);
    if (hvdrun_allgather(mine.data(), all.data(), count, HVDRUN_INT32) != 0) {
      fail(std::string("allgather failed: ") + hvdrun_last_error());
      continue;
    }
    for (int q = 0; q < n; ++q)
      for (std::size_t i = 0; i < count; ++i)
        if (all[q * count + i] != static_cast<std::int32_t>(q * 100000 + i)) {
          fail("allgather wrong for rank " + std::to_string(q));
          q = n;
          break;
        }
  }
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
  if (g_failures) {
    std::fprintf(stderr, "rank %d: %d checks failed\n", me, g_failures);
    return 1;
  }
  return 0;
}
