// Scale factors with Horovod's arithmetic (runtime/reduce/scale.h), the one implementation
// every front end's prescale and postscale now runs through.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/reduce/reduce.h"
#include "runtime/reduce/scale.h"

using hvdrun::DataType;
using hvdrun::runtime::BFloat16;
using hvdrun::runtime::Half;
using hvdrun::runtime::scale;
using hvdrun::runtime::scale_into;
using hvdrun::runtime::to_bfloat16;
using hvdrun::runtime::to_float;
using hvdrun::runtime::to_half;

TEST_CASE(
    "scale: float32 multiplies by the factor rounded to float32, in place or into another buffer") {
  const std::vector<float> x{1.0F, -3.0F, 0.1F, 1e30F};
  std::vector<float> out(x.size(), 7.0F);
  scale_into(out.data(), x.data(), x.size(), DataType::kFloat32, 0.1);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(out[i] == x[i] * 0.1F);
  std::vector<float> in_place = x;
  scale(in_place.data(), in_place.size(), DataType::kFloat32, 0.1);
  CHECK(in_place == out);
}

TEST_CASE("scale: float64 multiplies in double precision") {
  std::vector<double> x{1.0, -3.0, 0.1};
  scale(x.data(), x.size(), DataType::kFloat64, 1.0 / 3.0);
  CHECK(x[0] == 1.0 / 3.0);
  CHECK(x[1] == -3.0 * (1.0 / 3.0));
  CHECK(x[2] == 0.1 * (1.0 / 3.0));
}

TEST_CASE("scale: float16 and bfloat16 go through float32 and are rounded once") {
  // 0.1 in half precision times 3 computed in float then rounded, not in half steps.
  std::vector<Half> h{to_half(0.1F), to_half(-2.5F), to_half(60000.0F)};
  scale(h.data(), h.size(), DataType::kFloat16, 3.0);
  CHECK(h[0].bits == to_half(to_float(to_half(0.1F)) * 3.0F).bits);
  CHECK(to_float(h[1]) == -7.5F);
  CHECK(std::isinf(to_float(h[2])));  // 180000 overflows half precision
  std::vector<BFloat16> b{to_bfloat16(1.5F), to_bfloat16(-0.3F)};
  scale(b.data(), b.size(), DataType::kBFloat16, 0.5);
  CHECK(to_float(b[0]) == 0.75F);
  CHECK(b[1].bits == to_bfloat16(to_float(to_bfloat16(-0.3F)) * 0.5F).bits);
}

TEST_CASE("scale: integers are multiplied in double and truncated toward zero") {
  std::vector<std::int32_t> i32{7, -7, 3, std::numeric_limits<std::int32_t>::max()};
  scale(i32.data(), i32.size(), DataType::kInt32, 0.5);
  CHECK(i32 == std::vector<std::int32_t>{3, -3, 1, 1073741823});
  std::vector<std::int64_t> i64{5, -5, std::int64_t{1} << 52};
  scale(i64.data(), i64.size(), DataType::kInt64, 2.5);
  CHECK(i64 == std::vector<std::int64_t>{12, -12, (std::int64_t{1} << 52) * 5 / 2});
}

TEST_CASE("scale: uint8 keeps the low byte of the truncated product and never traps") {
  std::vector<std::uint8_t> u{10, 200, 255};
  scale(u.data(), u.size(), DataType::kUInt8, 1.5);
  CHECK(u == std::vector<std::uint8_t>{15, static_cast<std::uint8_t>(300 % 256),
                                       static_cast<std::uint8_t>(382 % 256)});
  std::vector<std::uint8_t> neg{10};
  scale(neg.data(), neg.size(), DataType::kUInt8, -1.0);
  CHECK(neg[0] == static_cast<std::uint8_t>(-10));
  // A product past int64's range saturates instead of being undefined.
  std::vector<std::int64_t> big{std::numeric_limits<std::int64_t>::max()};
  scale(big.data(), big.size(), DataType::kInt64, 4.0);
  CHECK(big[0] == std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("scale: a factor of 1 leaves the buffer alone in place and copies out of place") {
  std::vector<float> x{1.5F, -2.0F};
  std::vector<float> out{0.0F, 0.0F};
  scale_into(out.data(), x.data(), x.size(), DataType::kFloat32, 1.0);
  CHECK(out == x);
  scale(x.data(), x.size(), DataType::kFloat32, 1.0);
  CHECK(x == std::vector<float>{1.5F, -2.0F});
}
