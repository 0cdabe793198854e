// The reducing kernels and their ops: allreduce, grouped allreduce (fusion buffers) and
// reducescatter. The scale factors and Average are libhvdrun's to apply (host tensors):
// the kernels pass them on with the collective and do no arithmetic of their own.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hvdrun/hvdrun_c.h"
#include "ops_internal.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdrun_tf {
namespace {

// A kernel that reduces: attrs reduce_op (libhvdrun's op) and the prescale/postscale
// factors.
class Reducing : public Base {
 public:
  explicit Reducing(tf::OpKernelConstruction* c) : Base(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
  }

 protected:
  // describe(), with this kernel's op and scale factors.
  hvdrun_collective reduction(Op* op, int kind, int ctype, const std::string& name,
                              std::vector<long long> shape, tf::DataType t) const {
    auto c = describe(op, kind, ctype, name, std::move(shape), t);
    c.op = op_;
    c.prescale = prescale_;
    c.postscale = postscale_;
    return c;
  }

  int op_ = HVDRUN_SUM;
  float prescale_ = 1.0F;
  float postscale_ = 1.0F;
};

// Allreduce. int8/int16 are reduced as int32 and narrowed back.
class Allreduce : public Reducing {
 public:
  explicit Allreduce(tf::OpKernelConstruction* c) : Reducing(c) {}

 private:
  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& in = ctx->input(0);
    const tf::DataType t = in.dtype();
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out));
    const auto n = static_cast<std::size_t>(in.NumElements());
    const bool widen = t == tf::DT_INT8 || t == tf::DT_INT16;
    int ctype = HVDRUN_INT32;
    if (!widen) TF_RETURN_IF_ERROR(reduced_type(t, "allreduce", &ctype));
    const void* send = in.tensor_data().data();
    void* recv = bytes_of(*out);
    if (widen) send = recv = widened(op, in, out);
    auto c = reduction(op, HVDRUN_KIND_ALLREDUCE, ctype, tensor_name_, dims_of(in.shape()), t);
    c.send = send;
    c.recv = recv;
    c.count = n;
    submit(op, c);
    return absl::OkStatus();
  }

  // An int8/int16 input widened to int32 in a buffer of the op; the op's finish narrows
  // the reduced (and scaled) buffer into `out`. Returns the buffer, which the collective
  // reduces in place.
  std::int32_t* widened(Op* op, const tf::Tensor& in, tf::Tensor* out) const {
    const tf::DataType t = in.dtype();
    const auto n = static_cast<std::size_t>(in.NumElements());
    const void* send = in.tensor_data().data();
    auto* w = op->array<std::int32_t>(n);
    for (std::size_t i = 0; i < n; ++i)
      w[i] = t == tf::DT_INT8 ? static_cast<const std::int8_t*>(send)[i]
                              : static_cast<const std::int16_t*>(send)[i];
    op->finish = [w, out, n, t] {
      char* o = bytes_of(*out);
      for (std::size_t i = 0; i < n; ++i) {
        if (t == tf::DT_INT8)
          reinterpret_cast<std::int8_t*>(o)[i] = static_cast<std::int8_t>(w[i]);
        else
          reinterpret_cast<std::int16_t*>(o)[i] = static_cast<std::int16_t>(w[i]);
      }
    };
    return w;
  }
};

// Grouped allreduce: the tensors (one element type) are packed into fusion buffers of at most
// `fusion_bytes` each (a bigger tensor alone, reduced in place), one collective per buffer,
// and copied out after.
class GroupedAllreduce : public Reducing {
 public:
  explicit GroupedAllreduce(tf::OpKernelConstruction* c) : Reducing(c) {
    OP_REQUIRES_OK(c, c->GetAttr("fusion_bytes", &fusion_bytes_));
  }

 private:
  struct Bucket {
    int first, last;  // inputs [first, last)
    char* fused;      // packed buffer, or nullptr for a single tensor reduced in place
    std::size_t count;
  };

  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const int k = ctx->num_inputs();
    if (k == 0) return absl::OkStatus();
    const tf::DataType t = ctx->input(0).dtype();
    int ctype = 0;
    TF_RETURN_IF_ERROR(reduced_type(t, "grouped_allreduce", &ctype));
    std::vector<tf::Tensor*> outs(k);
    for (int i = 0; i < k; ++i) {
      TF_RETURN_IF_ERROR(
          ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &outs[i]));
    }
    const auto buckets = plan(op, outs);
    op->finish = [buckets, outs] {
      for (const Bucket& b : buckets) {
        if (b.fused == nullptr) continue;
        std::size_t at = 0;
        for (int i = b.first; i < b.last; ++i) {
          std::memcpy(bytes_of(*outs[i]), b.fused + at, outs[i]->TotalBytes());
          at += outs[i]->TotalBytes();
        }
      }
    };
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const Bucket& bk = buckets[b];
      const void* send = bk.fused;
      void* recv = bk.fused;
      if (recv == nullptr) {  // a single tensor: from its input into its output
        send = ctx->input(bk.first).tensor_data().data();
        recv = bytes_of(*outs[bk.first]);
      }
      const std::string name =
          tensor_name_.empty() ? std::string() : tensor_name_ + "." + std::to_string(b);
      const auto count = static_cast<long long>(bk.count);
      auto c = reduction(op, HVDRUN_KIND_ALLREDUCE, ctype, name, {count}, t);
      c.send = send;
      c.recv = recv;
      c.count = bk.count;
      submit(op, c);
    }
    return absl::OkStatus();
  }

  // Cuts the inputs into buckets of consecutive tensors under the fusion size and packs
  // every bucket of more than one tensor.
  std::vector<Bucket> plan(Op* op, const std::vector<tf::Tensor*>& outs) const {
    tf::OpKernelContext* ctx = op->ctx;
    const int k = static_cast<int>(outs.size());
    std::vector<Bucket> buckets;
    for (int i = 0; i < k;) {
      int j = i;
      std::size_t bytes = 0, count = 0;
      while (j < k && (j == i || bytes + ctx->input(j).TotalBytes() <=
                                     static_cast<std::size_t>(fusion_bytes_))) {
        bytes += ctx->input(j).TotalBytes();
        count += ctx->input(j).NumElements();
        ++j;
      }
      Bucket b{i, j, nullptr, count};
      if (j - i > 1) {
        b.fused = op->buffer(bytes).data();
        std::size_t at = 0;
        for (int m = i; m < j; ++m) {
          const auto data = ctx->input(m).tensor_data();
          std::memcpy(b.fused + at, data.data(), data.size());
          at += data.size();
        }
      }
      buckets.push_back(b);
      i = j;
    }
    return buckets;
  }

  int fusion_bytes_ = 16 << 20;
};

// Reducescatter along the first dimension: the tensor reduced over the ranks, each rank
// keeping its slice (ranks below rows % n get one row more, as in Horovod).
class Reducescatter : public Reducing {
 public:
  explicit Reducescatter(tf::OpKernelConstruction* c) : Reducing(c) {}

 private:
  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& in = ctx->input(0);
    const tf::DataType t = in.dtype();
    Rows rows;
    TF_RETURN_IF_ERROR(rows_of(in, "reducescatter", "splits", &rows));
    int ctype = 0;
    TF_RETURN_IF_ERROR(reduced_type(t, "reducescatter", &ctype));
    const long long first = in.dim_size(0);
    tf::TensorShape shape = in.shape();
    const long long mine = g_abi.reducescatter_rows(first, ps_);  // libhvdrun's split
    if (mine < 0) return absl::InvalidArgumentError(last_error());
    shape.set_dim(0, mine);
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &out));
    const auto count = static_cast<std::size_t>(in.NumElements());
    const void* send = in.tensor_data().data();
    auto c = reduction(op, HVDRUN_KIND_REDUCESCATTER, ctype, tensor_name_, dims_of(in.shape()), t);
    c.send = send;
    c.recv = bytes_of(*out);
    c.count = count;
    submit(op, c);
    return absl::OkStatus();
  }
};

}  // namespace
}  // namespace hvdrun_tf

// The element types each op accepts: libhvdrun's own, and for allreduce int8 and int16
// too (reduced as int32).
#define HVDRUN_TF_NATIVE "{uint8, int32, int64, float16, bfloat16, float32, float64}"
#define HVDRUN_TF_REDUCIBLE \
  "{uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64}"

REGISTER_OP("HvdrunAllreduce")
    .Attr("T: " HVDRUN_TF_REDUCIBLE)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("reduced: T")
    .SetShapeFn(hvdrun_tf::same_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunAllreduce").Device(::tensorflow::DEVICE_CPU),
                        hvdrun_tf::Allreduce);

REGISTER_OP("HvdrunGroupedAllreduce")
    .Attr("T: " HVDRUN_TF_NATIVE)
    .Attr("num_tensors: int >= 0")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("fusion_bytes: int = 16777216")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensors: num_tensors * T")
    .Output("reduced: num_tensors * T")
    .SetShapeFn(hvdrun_tf::same_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunGroupedAllreduce").Device(::tensorflow::DEVICE_CPU),
                        hvdrun_tf::GroupedAllreduce);

REGISTER_OP("HvdrunReducescatter")
    .Attr("T: " HVDRUN_TF_NATIVE)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(hvdrun_tf::gathered_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunReducescatter").Device(::tensorflow::DEVICE_CPU),
                        hvdrun_tf::Reducescatter);
