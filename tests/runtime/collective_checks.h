// Shared by the rank programs of the runtime tests (host and device collectives): the
// inputs every rank contributes, the result each reduction must give, the allreduce
// check over every op, in place and not, and the broadcast and allgather checks. The
// caller supplies how to run one collective on host buffers, so host (Gloo) and device
// (NCCL) collectives are checked against the same expectations.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/reduce/reduce.h"

namespace hvdrun_test {

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::runtime::BFloat16;
using hvdrun::runtime::Half;

inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};

/// Failed checks so far in this process; the first ten are printed with the rank.
inline int& failures() {
  static int n = 0;
  return n;
}

inline void fail(const std::string& what) {
  if (failures()++ < 10) std::fprintf(stderr, "rank %d: %s\n", hvdrun::rank(), what.c_str());
}

/// Input element i of rank r for op `op`: small integers so every dtype is exact.
inline double input(int r, std::size_t i, ReduceOp op) {
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

/// What element i must hold after reducing with `op` over n ranks.
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

/// Runs one allreduce of `count` elements from `send` into `out` (out == send: in
/// place); returns "" or why it failed.
using AllreduceFn = std::function<std::string(const void* send, void* out, std::size_t count,
                                              DataType dtype, ReduceOp op)>;

/// Checks every op, in place and not, for element type T: the result on every element,
/// and that an out-of-place allreduce leaves its input alone.
template <typename T>
void check_allreduce(const AllreduceFn& allreduce, DataType dt, const char* name,
                     std::size_t count) {
  const int n = hvdrun::size();
  const int r = hvdrun::rank();
  double tol = std::is_integral_v<T> ? 0 : (sizeof(T) == 2 ? 1e-2 : 1e-6);
  for (auto op : kAllOps) {
    for (bool in_place : {true, false}) {
      std::vector<T> send(count);
      std::vector<T> recv(count, make<T>(-7));
      for (std::size_t i = 0; i < count; ++i) send[i] = make<T>(input(r, i, op));
      auto before = send;
      T* out = in_place ? send.data() : recv.data();
      if (auto err = allreduce(send.data(), out, count, dt, op); !err.empty()) {
        fail(std::string(name) + ": allreduce failed: " + err);
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

/// check_allreduce for every element type at each count.
inline void check_every_dtype(const AllreduceFn& allreduce,
                              std::initializer_list<std::size_t> counts) {
  for (std::size_t count : counts) {
    check_allreduce<std::int32_t>(allreduce, DataType::kInt32, "int32", count);
    check_allreduce<std::int64_t>(allreduce, DataType::kInt64, "int64", count);
    check_allreduce<float>(allreduce, DataType::kFloat32, "float32", count);
    check_allreduce<double>(allreduce, DataType::kFloat64, "float64", count);
    check_allreduce<Half>(allreduce, DataType::kFloat16, "float16", count);
    check_allreduce<BFloat16>(allreduce, DataType::kBFloat16, "bfloat16", count);
    check_allreduce<std::uint8_t>(allreduce, DataType::kUInt8, "uint8", count);
  }
}

/// Runs one broadcast of `count` elements of `buf` from `root`; returns "" or why not.
using BroadcastFn =
    std::function<std::string(void* buf, std::size_t count, DataType dtype, int root)>;
/// Runs one allgather of `count` elements per rank; returns "" or why not.
using AllgatherFn =
    std::function<std::string(const void* send, void* recv, std::size_t count, DataType dtype)>;

/// Broadcasts `count` float64 from the first and from the last rank; every rank must
/// end with the root's values.
inline void check_broadcast(const BroadcastFn& broadcast, std::size_t count) {
  const int n = hvdrun::size();
  const int r = hvdrun::rank();
  for (int root : {0, n - 1}) {
    auto want = [root](std::size_t i) { return static_cast<double>(i) * 0.5 + root; };
    std::vector<double> buf(count);
    for (std::size_t i = 0; i < count; ++i) buf[i] = r == root ? want(i) : -1.0;
    if (auto err = broadcast(buf.data(), count, DataType::kFloat64, root); !err.empty()) {
      fail("broadcast from " + std::to_string(root) + " failed: " + err);
      continue;
    }
    for (std::size_t i = 0; i < count; ++i)
      if (buf[i] != want(i)) {
        fail("broadcast from " + std::to_string(root) + " wrong at " + std::to_string(i));
        break;
      }
  }
}

/// Allgathers `count` int32 per rank; every rank must get each rank's block in order.
inline void check_allgather(const AllgatherFn& allgather, std::size_t count) {
  const int n = hvdrun::size();
  const int r = hvdrun::rank();
  auto value = [](int q, std::size_t i) { return static_cast<std::int32_t>(q * 100000 + i); };
  std::vector<std::int32_t> mine(count);
  std::vector<std::int32_t> all(count * static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < count; ++i) mine[i] = value(r, i);
  if (auto err = allgather(mine.data(), all.data(), count, DataType::kInt32); !err.empty()) {
    fail("allgather of " + std::to_string(count) + " failed: " + err);
    return;
  }
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < count; ++i)
      if (all[static_cast<std::size_t>(q) * count + i] != value(q, i)) {
        fail("allgather of " + std::to_string(count) + " wrong for rank " + std::to_string(q));
        return;
      }
}

}  // namespace hvdrun_test
