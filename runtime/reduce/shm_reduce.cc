// Reduction loops (see shm_reduce.h). One generic body is inlined into two entry points,
// one compiled for baseline x86-64 and one for AVX2+FMA+F16C, so the compiler vectorises
// each for its target; this file is built with -O3 (runtime/CMakeLists.txt). float16 has
// no vectorisable software conversion, so the AVX2 build converts with F16C's
// vcvtph2ps/vcvtps2ph (round to nearest even, like to_half) and the tail of a buffer goes
// through runtime/reduce/reduce.h's conversions.
#include "runtime/reduce/shm_reduce.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "runtime/reduce/reduce.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define HVDRUN_X86 1
#endif

namespace hvdrun::runtime {

namespace {

// Integer arithmetic in the unsigned type, so overflow wraps instead of being undefined
// (what the Gloo path's static_cast<T>(x + y) gives on every target hvdrun runs on).
template <typename T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <typename T>
struct WideOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Wide = typename WideOf<T>::type;

template <typename T, typename Op>
[[gnu::always_inline]] inline void loop(T* __restrict dst, const T* __restrict src, std::size_t n,
                                        Op op) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = op(dst[i], src[i]);
}

template <typename T>
[[gnu::always_inline]] inline void reduce_plain(T* dst, const T* src, std::size_t n, ReduceOp op) {
  using W = Wide<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return loop(dst, src, n, [](T x, T y) { return static_cast<T>(W(x) + W(y)); });
    case ReduceOp::kProduct:
      return loop(dst, src, n, [](T x, T y) { return static_cast<T>(W(x) * W(y)); });
    case ReduceOp::kMin:
      return loop(dst, src, n, [](T x, T y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return loop(dst, src, n, [](T x, T y) { return std::max(x, y); });
  }
}

// bfloat16 <-> float are bit operations the compiler vectorises: the upper half of a
// binary32, rounded to nearest even (NaN kept quiet), as to_bfloat16.
[[gnu::always_inline]] inline float bf_load(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}
[[gnu::always_inline]] inline std::uint16_t bf_store(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  std::uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<std::uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

template <typename Op>
[[gnu::always_inline]] inline void loop_bf16(std::uint16_t* __restrict dst,
                                             const std::uint16_t* __restrict src, std::size_t n,
                                             Op op) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf_store(op(bf_load(dst[i]), bf_load(src[i])));
}

template <typename Op>
[[gnu::always_inline]] inline void loop_half(std::uint16_t* dst, const std::uint16_t* src,
                                             std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i)
    dst[i] = to_half(op(to_float(Half{dst[i]}), to_float(Half{src[i]}))).bits;
}

#if HVDRUN_X86
// float16 through F16C, 8 elements at a time; returns how many it did (a multiple of 8).
__attribute__((target("avx2,fma,f16c"))) std::size_t half_f16c(std::uint16_t* dst,
                                                               const std::uint16_t* src,
                                                               std::size_t n, int which) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    __m256 r;
    switch (which) {
      case 0:
        r = _mm256_add_ps(x, y);
        break;
      case 1:
        r = _mm256_mul_ps(x, y);
        break;
      case 2:  // std::min(x, y) is (y < x ? y : x), which is minps(y, x)
        r = _mm256_min_ps(y, x);
        break;
      default:  // std::max(x, y) is (x < y ? y : x), which is maxps(y, x)
        r = _mm256_max_ps(y, x);
        break;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return i;
}
#endif

template <bool kF16c, typename Op>
[[gnu::always_inline]] inline void loop16(bool bf16, void* d, const void* s, std::size_t n,
                                          [[maybe_unused]] int which, Op op) {
  auto* dst = static_cast<std::uint16_t*>(d);
  const auto* src = static_cast<const std::uint16_t*>(s);
  if (bf16) return loop_bf16(dst, src, n, op);
  std::size_t i = 0;
#if HVDRUN_X86
  if constexpr (kF16c) i = half_f16c(dst, src, n, which);
#endif
  loop_half(dst + i, src + i, n - i, op);
}

template <bool kF16c>
[[gnu::always_inline]] inline void reduce_16(bool bf16, void* dst, const void* src, std::size_t n,
                                             ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return loop16<kF16c>(bf16, dst, src, n, 0, [](float a, float b) { return a + b; });
    case ReduceOp::kProduct:
      return loop16<kF16c>(bf16, dst, src, n, 1, [](float a, float b) { return a * b; });
    case ReduceOp::kMin:
      return loop16<kF16c>(bf16, dst, src, n, 2, [](float a, float b) { return std::min(a, b); });
    case ReduceOp::kMax:
      return loop16<kF16c>(bf16, dst, src, n, 3, [](float a, float b) { return std::max(a, b); });
  }
}

template <bool kF16c>
[[gnu::always_inline]] inline void reduce_any(void* dst, const void* src, std::size_t n,
                                              DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kInt32:
      return reduce_plain(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(src), n,
                          op);
    case DataType::kInt64:
      return reduce_plain(static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(src), n,
                          op);
    case DataType::kFloat32:
      return reduce_plain(static_cast<float*>(dst), static_cast<const float*>(src), n, op);
    case DataType::kFloat64:
      return reduce_plain(static_cast<double*>(dst), static_cast<const double*>(src), n, op);
    case DataType::kUInt8:
      return reduce_plain(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), n,
                          op);
    case DataType::kFloat16:
      return reduce_16<kF16c>(false, dst, src, n, op);
    case DataType::kBFloat16:
      return reduce_16<kF16c>(true, dst, src, n, op);
  }
}

void reduce_baseline(void* dst, const void* src, std::size_t n, DataType dtype, ReduceOp op) {
  reduce_any<false>(dst, src, n, dtype, op);
}

#if HVDRUN_X86
__attribute__((target("avx2,fma,f16c"))) void reduce_avx2(void* dst, const void* src, std::size_t n,
                                                          DataType dtype, ReduceOp op) {
  reduce_any<true>(dst, src, n, dtype, op);
}
#endif

using ReduceFn = void (*)(void*, const void*, std::size_t, DataType, ReduceOp);

#if HVDRUN_X86
// AVX2, FMA and F16C in the CPU, and YMM state saved by the kernel (OSXSAVE + XCR0).
bool cpu_has_avx2_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  const bool fma = (c & (1u << 12)) != 0, osxsave = (c & (1u << 27)) != 0,
             avx = (c & (1u << 28)) != 0, f16c = (c & (1u << 29)) != 0;
  if (!(fma && osxsave && avx && f16c)) return false;
  unsigned lo = 0, hi = 0;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6u) != 6u) return false;  // XMM and YMM state enabled
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (b & (1u << 5)) != 0;  // AVX2
}
#endif

ReduceFn pick() {
#if HVDRUN_X86
  if (cpu_has_avx2_f16c()) return &reduce_avx2;
#endif
  return &reduce_baseline;
}

const ReduceFn g_reduce = pick();

template <typename T>
void divide_typed(T* buf, std::size_t n, int divisor) {
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, Half>)
      buf[i] = to_half(to_float(buf[i]) / static_cast<float>(divisor));
    else if constexpr (std::is_same_v<T, BFloat16>)
      buf[i] = to_bfloat16(to_float(buf[i]) / static_cast<float>(divisor));
    else if constexpr (std::is_integral_v<T>)  // in 64 bits: a uint8 divisor could be 0
      buf[i] = static_cast<T>(static_cast<std::int64_t>(buf[i]) / divisor);
    else
      buf[i] = static_cast<T>(buf[i] / static_cast<T>(divisor));
  }
}

}  // namespace

void reduce_into(void* dst, const void* src, std::size_t n, DataType dtype, ReduceOp op) {
  g_reduce(dst, src, n, dtype, op);
}

bool reduce_uses_avx2() { return g_reduce != &reduce_baseline; }

void finish_average(void* buf, std::size_t n, DataType dtype, ReduceOp op, int divisor) {
  if (op == ReduceOp::kAverage && divisor > 1) divide_by(buf, n, dtype, divisor);
}

void divide_by(void* buf, std::size_t n, DataType dtype, int divisor) {
  switch (dtype) {
    case DataType::kInt32:
      return divide_typed(static_cast<std::int32_t*>(buf), n, divisor);
    case DataType::kInt64:
      return divide_typed(static_cast<std::int64_t*>(buf), n, divisor);
    case DataType::kFloat32:
      return divide_typed(static_cast<float*>(buf), n, divisor);
    case DataType::kFloat64:
      return divide_typed(static_cast<double*>(buf), n, divisor);
    case DataType::kFloat16:
      return divide_typed(static_cast<Half*>(buf), n, divisor);
    case DataType::kBFloat16:
      return divide_typed(static_cast<BFloat16*>(buf), n, divisor);
    case DataType::kUInt8:
      return divide_typed(static_cast<std::uint8_t*>(buf), n, divisor);
  }
}

}  // namespace hvdrun::runtime
