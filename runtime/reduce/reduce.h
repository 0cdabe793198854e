// Element types Gloo does not reduce natively (IEEE half, bfloat16) and the reduction
// functions for every supported type and operation.
#pragma once

#include <cstdint>
#include <cstring>

namespace hvdrun::runtime {

/// IEEE 754 binary16, stored as bits.
struct Half {
  std::uint16_t bits;
};
/// bfloat16 (upper half of a binary32), stored as bits.
struct BFloat16 {
  std::uint16_t bits;
};

/// binary16 -> float (exact).
inline float to_float(Half h) {
  std::uint32_t sign = std::uint32_t(h.bits & 0x8000) << 16;
  std::uint32_t exp = (h.bits >> 10) & 0x1f;
  std::uint32_t man = h.bits & 0x3ff;
  std::uint32_t out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400) == 0);
      out = sign | std::uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | man << 13;
  } else {
    out = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

/// float -> binary16, round to nearest even.
inline Half to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
  std::uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000u)  // inf or nan
    return {static_cast<std::uint16_t>(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0))};
  if (absx >= 0x477ff000u) return {static_cast<std::uint16_t>(sign | 0x7c00)};  // overflow
  if (absx < 0x38800000u) {  // result is subnormal or zero
    if (absx < 0x33000000u) return {sign};
    std::uint32_t e = absx >> 23;
    std::uint32_t m = (absx & 0x7fffff) | 0x800000;
    int shift = static_cast<int>(126 - e);  // 113 + 13 - e
    std::uint32_t half_m = m >> shift;
    std::uint32_t rem = m & ((1u << shift) - 1);
    std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half_m & 1))) ++half_m;
    return {static_cast<std::uint16_t>(sign | half_m)};
  }
  std::uint32_t h = ((absx >> 13) - (112u << 10));
  std::uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return {static_cast<std::uint16_t>(sign | h)};
}

/// bfloat16 -> float (exact).
inline float to_float(BFloat16 b) {
  std::uint32_t x = std::uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

/// float -> bfloat16, round to nearest even.
inline BFloat16 to_bfloat16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000u) return {static_cast<std::uint16_t>((x >> 16) | 0x40)};
  x += 0x7fff + ((x >> 16) & 1);
  return {static_cast<std::uint16_t>(x >> 16)};
}

}  // namespace hvdrun::runtime
