// Scale factors with Horovod's arithmetic (scale.h).
#include "runtime/reduce/scale.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "runtime/reduce/reduce.h"
#include "runtime/reduce/shm_reduce.h"

namespace hvdrun::runtime {
namespace {

// A double truncated toward zero into T, through int64 so that no value is undefined: a
// narrower T keeps the low bits (what a framework's double-to-uint8 copy does on x86-64),
// and values past int64's range saturate.
template <typename T>
T truncated(double d) {
  constexpr double kTop = 9223372036854775807.0;  // 2^63 (the nearest double)
  std::int64_t i = 0;
  if (d != d) {
    i = 0;
  } else if (d >= kTop) {
    i = std::numeric_limits<std::int64_t>::max();
  } else if (d <= -kTop) {
    i = std::numeric_limits<std::int64_t>::min();
  } else {
    i = static_cast<std::int64_t>(d);
  }
  return static_cast<T>(i);
}

template <typename T>
void scale_typed(T* dst, const T* src, std::size_t n, double factor) {
  if constexpr (std::is_integral_v<T>) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = truncated<T>(static_cast<double>(src[i]) * factor);
  } else {
    const T f = static_cast<T>(factor);
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] * f;
  }
}

template <typename H, H (*Narrow)(float)>
void scale_half(H* dst, const H* src, std::size_t n, double factor) {
  const auto f = static_cast<float>(factor);
  for (std::size_t i = 0; i < n; ++i) dst[i] = Narrow(to_float(src[i]) * f);
}

}  // namespace

void scale_into(void* dst, const void* src, std::size_t n, DataType dtype, double factor) {
  if (factor == 1.0) {
    if (dst != src && n > 0) std::memmove(dst, src, n * element_bytes(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kInt32:
      return scale_typed(static_cast<std::int32_t*>(dst), static_cast<const std::int32_t*>(src), n,
                         factor);
    case DataType::kInt64:
      return scale_typed(static_cast<std::int64_t*>(dst), static_cast<const std::int64_t*>(src), n,
                         factor);
    case DataType::kFloat32:
      return scale_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, factor);
    case DataType::kFloat64:
      return scale_typed(static_cast<double*>(dst), static_cast<const double*>(src), n, factor);
    case DataType::kFloat16:
      return scale_half<Half, &to_half>(static_cast<Half*>(dst), static_cast<const Half*>(src), n,
                                        factor);
    case DataType::kBFloat16:
      return scale_half<BFloat16, &to_bfloat16>(static_cast<BFloat16*>(dst),
                                                static_cast<const BFloat16*>(src), n, factor);
    case DataType::kUInt8:
      return scale_typed(static_cast<std::uint8_t*>(dst), static_cast<const std::uint8_t*>(src), n,
                         factor);
  }
}

}  // namespace hvdrun::runtime
