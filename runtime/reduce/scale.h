// Multiplying a host buffer by a scale factor (prescale_factor, postscale_factor) with
// Horovod's arithmetic, the one place libhvdrun and its framework adapters take it from.
#pragma once

#include <cstddef>

#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

/// dst[i] = src[i] * factor for `n` elements of `dtype` (dst == src scales in place):
/// float32 and float64 in their own precision (the factor rounded to the type), float16 and
/// bfloat16 through float (rounded once), integers through double and truncated toward
/// zero (uint8 keeps the low byte of the truncated value). Nothing is done for a factor of
/// 1 in place; out of place, the elements are then copied.
void scale_into(void* dst, const void* src, std::size_t n, DataType dtype, double factor);

/// scale_into(buf, buf, ...).
inline void scale(void* buf, std::size_t n, DataType dtype, double factor) {
  scale_into(buf, buf, n, dtype, factor);
}

}  // namespace hvdrun::runtime
