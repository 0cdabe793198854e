// The kernels that move data without reducing it, and their ops: broadcast, and the
// two-step collectives along the first dimension, allgather and alltoall (row counts
// first, then the rows). Any fixed-size element type moves, as bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "hvdrun/hvdrun_c.h"
#include "ops_internal.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvdrun_tf {
namespace {

// Broadcast from `root_rank`, any element type moved as bytes.
class Broadcast : public Base {
 public:
  explicit Broadcast(tf::OpKernelConstruction* c) : Base(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }

 private:
  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& in = ctx->input(0);
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->forward_input_or_allocate_output({0}, 0, in.shape(), &out));
    // Only the root's data matters: the others' output is overwritten.
    if (bytes_of(*out) != in.tensor_data().data() && g_abi.query[0]() == root_)
      std::memcpy(bytes_of(*out), in.tensor_data().data(), in.TotalBytes());
    auto c = describe(op, HVDRUN_KIND_BROADCAST, HVDRUN_UINT8, tensor_name_, dims_of(in.shape()),
                      in.dtype());
    c.recv = bytes_of(*out);
    c.count = in.TotalBytes();
    c.root = root_;
    submit(op, c);
    return absl::OkStatus();
  }

  int root_ = 0;
};

// A collective of two steps along the first dimension, whose row counts differ between
// ranks: first an allgather of every rank's counts, described with the tensor's shape and
// element type so that the ranks also agree on the other dimensions and the type; then the
// rows, as raw bytes, submitted from the first step's `then` (libhvdrun's thread) so that
// each rank can size its output and the second step takes the same place in the agreed
// order on every rank (hvdrun.torch's allgather and alltoall do the same).
class TwoStep : public Base {
 public:
  using Base::Base;

 protected:
  // What submits the second step, given its name.
  using Second = std::function<absl::Status(const std::string& name)>;

  // Submits the first step of `what` ("allgather"): `count` row counts from `send`,
  // gathered from every rank into `recv`. Once it succeeded, `second` runs with the second
  // step's name (step_name(), followed by `suffix`).
  void submit_counts(Op* op, const char* what, const char* suffix, const long long* send,
                     long long* recv, std::size_t count, Second second) const {
    const tf::Tensor& in = op->ctx->input(0);
    auto c = describe(op, HVDRUN_KIND_ALLGATHER, HVDRUN_INT64, tensor_name_, dims_of(in.shape()),
                      in.dtype());
    c.send = send;
    c.recv = recv;
    c.count = count;
    auto next = [second = std::move(second), base = tensor_name_, what, suffix, ps = ps_](
                    long long seq) { return second(step_name(base, what, ps, seq) + suffix); };
    submit(op, c, std::move(next));
  }

  // The second step's name: after the first step's name, or after `what` and the first
  // step's agreed position among the unnamed collectives of its process set.
  static std::string step_name(const std::string& base, const char* what, int ps, long long seq) {
    if (!base.empty()) return base;
    return std::string(what) + "." + std::to_string(ps) + "." + std::to_string(seq);
  }

  // Output 0 of `op`: the input's shape with `rows` rows.
  static absl::Status allocate_rows(Op* op, long long rows, tf::Tensor** out) {
    tf::TensorShape shape = op->ctx->input(0).shape();
    shape.set_dim(0, rows);
    return op->ctx->allocate_output(0, shape, out);
  }

  // The second step: `count` bytes of rows from `send` into `recv`, named `name` (which
  // must live until it is submitted), in process set `ps`.
  static hvdrun_collective bytes_step(int kind, const void* send, void* recv, std::size_t count,
                                      const std::string& name, int ps) {
    hvdrun_collective c{};
    c.kind = kind;
    c.dtype = HVDRUN_UINT8;
    c.send = send;
    c.recv = recv;
    c.count = count;
    c.name = name.c_str();
    c.process_set = ps;
    return c;
  }
};

// Allgather along the first dimension (which may differ between ranks): the ranks' first
// dimensions first (the whole shape is agreed there), then the rows padded to the longest
// rank's.
class Allgather : public TwoStep {
 public:
  using TwoStep::TwoStep;

 private:
  absl::Status start(Op* op) override {
    const tf::Tensor& in = op->ctx->input(0);
    Rows rows;
    TF_RETURN_IF_ERROR(rows_of(in, "allgather", "concatenates along", &rows));
    auto* mine = op->array<long long>(1);
    *mine = in.dim_size(0);
    auto* firsts = op->array<long long>(rows.n);
    submit_counts(op, "allgather", ".data", mine, firsts, 1,
                  [op, firsts, rows, ps = ps_](const std::string& name) {
                    return gather_rows(op, firsts, rows, ps, name);
                  });
    return absl::OkStatus();
  }

  // The second step, on libhvdrun's thread once every rank's first dimension is known.
  static absl::Status gather_rows(Op* op, const long long* firsts, Rows rows, int ps,
                                  const std::string& name) {
    const int n = rows.n;
    const std::size_t rowbytes = rows.bytes;
    long long total = 0, biggest = 0;
    for (int r = 0; r < n; ++r) {
      total += firsts[r];
      biggest = std::max(biggest, firsts[r]);
    }
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(allocate_rows(op, total, &out));
    if (biggest == 0 || rowbytes == 0) return absl::OkStatus();
    const tf::Tensor& src = op->ctx->input(0);
    const std::size_t slot = biggest * rowbytes;
    const char* send = src.tensor_data().data();
    if (src.TotalBytes() != slot) {  // pad this rank's rows to the longest rank's
      auto& pad = op->buffer(slot);
      std::memcpy(pad.data(), send, src.TotalBytes());
      send = pad.data();
    }
    char* recv = bytes_of(*out);
    if (total != biggest * n) {  // uneven: gather into a buffer, then drop the padding
      recv = op->buffer(slot * n).data();
      op->finish = [firsts, n, slot, rowbytes, recv, out] {
        char* o = bytes_of(*out);
        for (int r = 0; r < n; ++r) {
          std::memcpy(o, recv + r * slot, firsts[r] * rowbytes);
          o += firsts[r] * rowbytes;
        }
      };
    }
    submit(op, bytes_step(HVDRUN_KIND_ALLGATHER, send, recv, slot, name, ps));
    return absl::OkStatus();
  }
};

// Alltoall along the first dimension: every rank's splits first (an allgather of n rows
// counts, on which the ranks also agree about the other dimensions and the type), then
// the rows. Outputs: the rows received, in rank order, and how many came from each rank.
class Alltoall : public TwoStep {
 public:
  using TwoStep::TwoStep;

 private:
  absl::Status start(Op* op) override {
    const tf::Tensor& in = op->ctx->input(0);
    Rows rows;
    TF_RETURN_IF_ERROR(rows_of(in, "alltoall", "splits", &rows));
    auto* send_rows = op->array<long long>(rows.n);
    TF_RETURN_IF_ERROR(splits_of(op->ctx->input(1), in.dim_size(0), rows.n, send_rows));
    auto* table = op->array<long long>(static_cast<std::size_t>(rows.n) * rows.n);
    submit_counts(op, "alltoall", ".rows", send_rows, table, rows.n,
                  [op, send_rows, table, rows, ps = ps_](const std::string& name) {
                    return exchange(op, send_rows, table, rows, ps, name);
                  });
    return absl::OkStatus();
  }

  // The rows this rank sends to each of the `n` ranks, in `send_rows`: `splits`, or when
  // it is empty, the first dimension (`first`) split equally.
  static absl::Status splits_of(const tf::Tensor& splits, long long first, int n,
                                long long* send_rows) {
    if (splits.NumElements() == 0) {
      if (first % n != 0)
        return absl::InvalidArgumentError("hvdrun alltoall: the first dimension (" +
                                          std::to_string(first) +
                                          ") cannot be split equally among " + std::to_string(n) +
                                          " ranks; pass splits (rows for each rank)");
      for (int r = 0; r < n; ++r) send_rows[r] = first / n;
      return absl::OkStatus();
    }
    if (splits.dims() != 1 || splits.NumElements() != n)
      return absl::InvalidArgumentError("hvdrun alltoall: splits has " +
                                        splits.shape().DebugString() +
                                        " entries; give one per rank (" + std::to_string(n) + ")");
    long long sum = 0;
    for (int r = 0; r < n; ++r) {
      send_rows[r] = splits.flat<std::int32_t>()(r);
      if (send_rows[r] < 0)
        return absl::InvalidArgumentError("hvdrun alltoall: splits has a negative entry");
      sum += send_rows[r];
    }
    if (sum > first)
      return absl::InvalidArgumentError("hvdrun alltoall: splits add up to " + std::to_string(sum) +
                                        " rows but the tensor's first dimension is " +
                                        std::to_string(first));
    return absl::OkStatus();
  }

  // The second step, on libhvdrun's thread once every rank's splits are known.
  static absl::Status exchange(Op* op, const long long* send_rows, const long long* table,
                               Rows rows, int ps, const std::string& name) {
    const int n = rows.n;
    long long total = 0, moving = 0;
    tf::Tensor* received = nullptr;
    TF_RETURN_IF_ERROR(op->ctx->allocate_output(1, tf::TensorShape({n}), &received));
    for (int r = 0; r < n; ++r) {
      const long long from = table[static_cast<std::size_t>(r) * n + rows.me];
      received->flat<std::int32_t>()(r) = static_cast<std::int32_t>(from);
      total += from;
    }
    for (int i = 0; i < n * n; ++i) moving += table[i];
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(allocate_rows(op, total, &out));
    if (rows.bytes == 0 || moving == 0) return absl::OkStatus();  // every rank skips alike
    auto* bytes = op->array<long long>(n);
    auto* got = op->array<long long>(n);
    long long sent = 0;
    for (int r = 0; r < n; ++r) {
      bytes[r] = send_rows[r] * static_cast<long long>(rows.bytes);
      sent += bytes[r];
    }
    auto d = bytes_step(HVDRUN_KIND_ALLTOALL, op->ctx->input(0).tensor_data().data(),
                        bytes_of(*out), static_cast<std::size_t>(sent), name, ps);
    d.splits = bytes;
    d.received_splits = got;
    d.recv_count = out->TotalBytes();
    submit(op, d);
    return absl::OkStatus();
  }
};

absl::Status alltoall_shape(tf::shape_inference::InferenceContext* c) {
  TF_RETURN_IF_ERROR(gathered_shape(c));
  c->set_output(1, c->Vector(c->UnknownDim()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace hvdrun_tf

// The element types these ops accept: any of fixed size.
#define HVDRUN_TF_MOVABLE                                                                   \
  "{uint8, int8, uint16, int16, int32, uint32, int64, uint64, float16, bfloat16, float32, " \
  "float64, bool, complex64, complex128}"

REGISTER_OP("HvdrunBroadcast")
    .Attr("T: " HVDRUN_TF_MOVABLE)
    .Attr("root_rank: int")
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("broadcast: T")
    .SetShapeFn(hvdrun_tf::same_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunBroadcast").Device(::tensorflow::DEVICE_CPU),
                        hvdrun_tf::Broadcast);

REGISTER_OP("HvdrunAllgather")
    .Attr("T: " HVDRUN_TF_MOVABLE)
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Output("gathered: T")
    .SetShapeFn(hvdrun_tf::gathered_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunAllgather").Device(::tensorflow::DEVICE_CPU),
                        hvdrun_tf::Allgather);

REGISTER_OP("HvdrunAlltoall")
    .Attr("T: " HVDRUN_TF_MOVABLE)
    .Attr("tensor_name: string = ''")
    .Attr("process_set_id: int = 0")
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn(hvdrun_tf::alltoall_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunAlltoall").Device(::tensorflow::DEVICE_CPU),
                        hvdrun_tf::Alltoall);
