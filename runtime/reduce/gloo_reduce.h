// The reduction functions GlooComm (runtime/gloo/gloo_comm.cc) hands Gloo's allreduce
// algorithms: one per dtype and op, average summing (the divide comes after), 16-bit
// floats computed in float and rounded once per step. Internal to libhvdrun.
#pragma once

#include <gloo/algorithm.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "hvdrun/hvdrun.h"
#include "runtime/reduce/reduce.h"

namespace hvdrun::runtime::gloo_reduction {

template <typename T>
void fn_sum(T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] + y[i]);
}
template <typename T>
void fn_prod(T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * y[i]);
}
template <typename T>
void fn_min(T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = std::min(x[i], y[i]);
}
template <typename T>
void fn_max(T* x, const T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = std::max(x[i], y[i]);
}

// 16-bit floats: compute in float, round once per step.
template <typename H, H (*from)(float), typename Op>
void fn_16(H* x, const H* y, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) x[i] = from(op(to_float(x[i]), to_float(y[i])));
}

// The function for `op` among one dtype's four (average sums, then divides).
template <typename T>
const gloo::ReductionFunction<T>* pick_reduction(ReduceOp op, const gloo::ReductionFunction<T>& sum,
                                                 const gloo::ReductionFunction<T>& prod,
                                                 const gloo::ReductionFunction<T>& mn,
                                                 const gloo::ReductionFunction<T>& mx) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return &sum;
    case ReduceOp::kProduct:
      return &prod;
    case ReduceOp::kMin:
      return &mn;
    case ReduceOp::kMax:
      return &mx;
  }
  return nullptr;
}

template <typename T>
const gloo::ReductionFunction<T>* reduction(ReduceOp op) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    constexpr auto conv = [] {
      if constexpr (std::is_same_v<T, Half>)
        return &to_half;
      else
        return &to_bfloat16;
    }();
    static const gloo::ReductionFunction<T> sum(gloo::SUM, [](T* x, const T* y, std::size_t n) {
      fn_16<T, conv>(x, y, n, [](float a, float b) { return a + b; });
    });
    static const gloo::ReductionFunction<T> prod(
        gloo::PRODUCT, [](T* x, const T* y, std::size_t n) {
          fn_16<T, conv>(x, y, n, [](float a, float b) { return a * b; });
        });
    static const gloo::ReductionFunction<T> mn(gloo::MIN, [](T* x, const T* y, std::size_t n) {
      fn_16<T, conv>(x, y, n, [](float a, float b) { return std::min(a, b); });
    });
    static const gloo::ReductionFunction<T> mx(gloo::MAX, [](T* x, const T* y, std::size_t n) {
      fn_16<T, conv>(x, y, n, [](float a, float b) { return std::max(a, b); });
    });
    return pick_reduction(op, sum, prod, mn, mx);
  } else {
    static const gloo::ReductionFunction<T> sum(gloo::SUM, &fn_sum<T>);
    static const gloo::ReductionFunction<T> prod(gloo::PRODUCT, &fn_prod<T>);
    static const gloo::ReductionFunction<T> mn(gloo::MIN, &fn_min<T>);
    static const gloo::ReductionFunction<T> mx(gloo::MAX, &fn_max<T>);
    return pick_reduction(op, sum, prod, mn, mx);
  }
  return nullptr;
}

}  // namespace hvdrun::runtime::gloo_reduction
