// hvdrun's TensorFlow ops: asynchronous kernels (AsyncOpKernel, as Horovod's are) that hand
// their tensors to libhvdrun's C ABI and complete when the collective has, so they run in
// eager mode and inside tf.function graphs alike without holding one of TensorFlow's
// threads while peers catch up. Built against the installed TensorFlow by
// hvdrun/_tf_build.py (on first use, or by the build tree's CMake); Python
// (hvdrun/tensorflow/mpi_ops.py) binds the libhvdrun that hvdrun._lib loaded with
// hvdrun_tf_bind, so one library serves both.
//
// The library's sources, all behind ops_internal.h:
//   ops.cc         the C ABI binding, process sets, element types and scaling, shape
//                  functions, and the query op (rank(), size() in a graph)
//   ops_submit.cc  one kernel invocation (Op), the submission of its collectives and the
//                  completion thread that finishes them; the kernels' base class
//   ops_reduce.cc  the reducing kernels: allreduce, grouped allreduce, reducescatter
//   ops_move.cc    the kernels that move data: broadcast, allgather, alltoall
// hvdrun._tf_build compiles them as one translation unit, so that TensorFlow's headers are
// parsed once: no two may define one name in their anonymous namespaces. A new source goes
// into its SOURCES and into tests/tensorflow/CMakeLists.txt's DEPENDS.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "hvdrun/hvdrun_c.h"
#include "ops_internal.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvdrun_tf {

// ---- the C ABI, as hvdrun._lib loaded it ------------------------------------------------

Abi g_abi;
std::atomic<bool> g_bound{false};

absl::Status not_bound() {
  return absl::FailedPreconditionError(
      "hvdrun: the TensorFlow ops are not bound to libhvdrun; import hvdrun.tensorflow (which "
      "loads and binds them) instead of loading the op library directly");
}

std::string last_error() {
  const char* e = g_abi.last_error();
  return e != nullptr && *e != '\0' ? e : "unknown error";
}

std::vector<int> members(int ps) {
  if (ps == 0) {
    std::vector<int> all(std::max(g_abi.query[1](), 0));
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    return all;
  }
  const int n = g_abi.process_set_ranks(ps, nullptr, 0);
  if (n < 0) return {};
  std::vector<int> out(n);
  g_abi.process_set_ranks(ps, out.data(), n);
  return out;
}

absl::Status place_in(int ps, int* me, int* n, const char* what) {
  const std::vector<int> m = members(ps);
  const int rank = g_abi.query[0]();
  const auto it = std::find(m.begin(), m.end(), rank);
  if (m.empty() || it == m.end())
    return absl::FailedPreconditionError(
        std::string("hvdrun ") + what + ": rank " + std::to_string(rank) +
        (m.empty() ? " names process set " + std::to_string(ps) + ", which does not exist"
                   : " is not a member of process set " + std::to_string(ps)) +
        "; add the set on every rank with hvd.add_process_set() and pass it only on its "
        "members");
  *me = static_cast<int>(it - m.begin());
  *n = static_cast<int>(m.size());
  return absl::OkStatus();
}

// ---- element types and tensors ----------------------------------------------------------

namespace {

// libhvdrun's element type for a TensorFlow type it reduces natively; -1 otherwise.
int reduce_type(tf::DataType t) {
  switch (t) {
    case tf::DT_INT32:
      return HVDRUN_INT32;
    case tf::DT_INT64:
      return HVDRUN_INT64;
    case tf::DT_FLOAT:
      return HVDRUN_FLOAT32;
    case tf::DT_DOUBLE:
      return HVDRUN_FLOAT64;
    case tf::DT_HALF:
      return HVDRUN_FLOAT16;
    case tf::DT_BFLOAT16:
      return HVDRUN_BFLOAT16;
    case tf::DT_UINT8:
      return HVDRUN_UINT8;
    default:
      return -1;
  }
}

}  // namespace

absl::Status reduced_type(tf::DataType t, const char* what, int* ctype) {
  *ctype = reduce_type(t);
  if (*ctype < 0)
    return absl::InvalidArgumentError(std::string("hvdrun ") + what + ": " + type_name_of(t) +
                                      " tensors cannot be reduced");
  return absl::OkStatus();
}

std::string type_name_of(tf::DataType t) {
  switch (t) {
    case tf::DT_FLOAT:
      return "float32";
    case tf::DT_DOUBLE:
      return "float64";
    case tf::DT_HALF:
      return "float16";
    default:
      return tf::DataTypeString(t);  // int32, bfloat16, bool, ...
  }
}

std::vector<long long> dims_of(const tf::TensorShape& s) {
  std::vector<long long> d;
  for (int i = 0; i < s.dims(); ++i) d.push_back(s.dim_size(i));
  return d;
}

// ---- shape functions --------------------------------------------------------------------

absl::Status same_shape(tf::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

absl::Status gathered_shape(tf::shape_inference::InferenceContext* c) {
  tf::shape_inference::ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

namespace {

absl::Status scalar_shape(tf::shape_inference::InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

// ---- the query op -----------------------------------------------------------------------

// rank(), size() and the like at graph execution time (`which`: 0-5 as Abi::query, 6: whether
// this rank is in process set `process_set_id`). size and inclusion read the process set.
class Query : public tf::OpKernel {
 public:
  explicit Query(tf::OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("which", &which_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &ps_));
    OP_REQUIRES(c, which_ >= 0 && which_ <= 6, absl::InvalidArgumentError("bad query"));
  }
  void Compute(tf::OpKernelContext* ctx) override {
    OP_REQUIRES(ctx, g_bound.load(), not_bound());
    int v = g_abi.query[which_ == 6 ? 0 : which_]();
    OP_REQUIRES(ctx, v >= 0,
                absl::FailedPreconditionError(
                    "hvdrun: rank/size queried before hvd.init(): call hvd.init() first"));
    if (which_ == 1 || which_ == 6) {
      const std::vector<int> m = members(ps_);
      if (which_ == 6)  // Horovod's answer for an unknown set: -3
        v = m.empty() ? -3 : (std::find(m.begin(), m.end(), v) != m.end() ? 1 : 0);
      else
        v = static_cast<int>(m.size());
      OP_REQUIRES(ctx, which_ == 6 || v > 0,
                  absl::InvalidArgumentError("hvdrun size_op: process set " + std::to_string(ps_) +
                                             " does not exist"));
    }
    tf::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tf::TensorShape({}), &out));
    out->scalar<std::int32_t>()() = v;
  }

 private:
  int which_ = 0;
  int ps_ = 0;
};

}  // namespace
}  // namespace hvdrun_tf

REGISTER_OP("HvdrunQuery")
    .Attr("which: int")
    .Attr("process_set_id: int = 0")
    .Output("value: int32")
    .SetIsStateful()
    .SetShapeFn(hvdrun_tf::scalar_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunQuery").Device(::tensorflow::DEVICE_CPU), hvdrun_tf::Query);

// Python (hvdrun/tensorflow/mpi_ops.py) passes the addresses of the C ABI functions of the
// libhvdrun it loaded. Returns 0.
extern "C" __attribute__((visibility("default"))) int hvdrun_tf_bind(void** fns, int count) {
  using hvdrun_tf::g_abi;
  if (count != 12) return -1;
  g_abi.submit_then = reinterpret_cast<decltype(g_abi.submit_then)>(fns[0]);
  g_abi.wait = reinterpret_cast<decltype(g_abi.wait)>(fns[1]);
  g_abi.poll = reinterpret_cast<decltype(g_abi.poll)>(fns[2]);
  g_abi.last_error = reinterpret_cast<decltype(g_abi.last_error)>(fns[3]);
  for (int i = 0; i < 6; ++i) g_abi.query[i] = reinterpret_cast<int (*)()>(fns[4 + i]);
  g_abi.process_set_ranks = reinterpret_cast<decltype(g_abi.process_set_ranks)>(fns[10]);
  g_abi.reducescatter_rows = reinterpret_cast<decltype(g_abi.reducescatter_rows)>(fns[11]);
  hvdrun_tf::g_bound.store(true);
  return 0;
}
