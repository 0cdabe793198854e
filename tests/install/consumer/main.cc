// A minimal program built against an installed libhvdrun: every rank contributes
// rank+1, sums with allreduce and prints one line; exits 1 when the sum is wrong.
#include <cstdint>
#include <cstdio>
#include <exception>

#include "hvdrun/hvdrun.h"

int main() {
  try {
    hvdrun::init();
    const int rank = hvdrun::rank(), size = hvdrun::size();
    std::int64_t value = rank + 1;
    hvdrun::allreduce(&value, 1, hvdrun::ReduceOp::kSum);
    const std::int64_t expected = static_cast<std::int64_t>(size) * (size + 1) / 2;
    std::printf("consumer rank %d/%d: sum %lld expected %lld %s\n", rank, size,
                static_cast<long long>(value), static_cast<long long>(expected),
                value == expected ? "ok" : "WRONG");
    hvdrun::shutdown();
    return value == expected ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
