// Element-wise reductions on host buffers for the shared-memory path: every DataType and
// ReduceOp of the API, with the semantics of the Gloo path (runtime/gloo/gloo_comm.cc): integer
// sums and products wrap, float16 and bfloat16 are computed in float and rounded to
// nearest even after every step, min and max are std::min/std::max. The loops are built
// twice, for baseline x86-64 and for AVX2 (with F16C for float16), and the AVX2 build is
// picked at run time when the CPU has it.
#pragma once

#include <cstddef>

#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

/// Bytes per element of `dtype` (dtype_size() without its check: `dtype` is valid).
constexpr std::size_t element_bytes(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

/// dst[i] = dst[i] op src[i] for `n` elements of `dtype`; kAverage reduces as kSum.
/// `dst` and `src` must not overlap.
void reduce_into(void* dst, const void* src, std::size_t n, DataType dtype, ReduceOp op);

/// buf[i] /= divisor: integer division for integers, float division (rounded once) for
/// 16-bit floats.
void divide_by(void* buf, std::size_t n, DataType dtype, int divisor);

/// The op a reduction runs before finish_average: kAverage sums (divided at the end),
/// every other op is itself.
constexpr ReduceOp summing(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

/// Finishes a reduction of `n` elements whose sum is in `buf`: for kAverage, divide_by
/// `divisor` (nothing when it is 1); any other op is final already. Every host-memory
/// path (shared memory, Gloo, the negotiated join) ends kAverage here.
void finish_average(void* buf, std::size_t n, DataType dtype, ReduceOp op, int divisor);

/// True when reduce_into runs its AVX2 build on this CPU.
bool reduce_uses_avx2();

}  // namespace hvdrun::runtime
