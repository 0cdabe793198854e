// hvdrun's TensorFlow ops: asynchronous kernels (AsyncOpKernel, as Horovod's are) that hand
// their tensors to libhvdrun's C ABI and complete when the collective has, so they run in
// eager mode and inside tf.function graphs alike without holding one of TensorFlow's
// threads while peers catch up. Built against the installed TensorFlow by
// hvdrun/tensorflow/_build.py (on first use, or by the build tree's CMake); Python binds
// the libhvdrun that hvdrun._lib loaded with hvdrun_tf_bind, so one library serves both.
//
// Completion: a collective's `then` callback (libhvdrun's thread, on success only) marks
// its step done and wakes this library's completion thread, which waits the handle (so its
// name is free again before the op's consumers run), finishes the op (postscale, copying
// out of a fusion or padding buffer) and calls TensorFlow's `done`. A failed collective
// never calls `then`: the completion thread polls the handles still out every 2 ms and
// fails their ops with libhvdrun's message.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "hvdrun/hvdrun_c.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvdrun_tf {
namespace {

namespace tf = ::tensorflow;
using DoneCallback = tf::AsyncOpKernel::DoneCallback;

// ---- the C ABI, as hvdrun._lib loaded it ------------------------------------------------

struct Abi {
  hvdrun_handle (*submit_then)(const hvdrun_collective*, size_t, void (*)(void*, long long),
                               void*) = nullptr;
  int (*wait)(hvdrun_handle) = nullptr;
  int (*poll)(hvdrun_handle) = nullptr;
  const char* (*last_error)() = nullptr;
  int (*query[6])() = {};  // rank, size, local_rank, local_size, cross_rank, cross_size
  int (*process_set_ranks)(int, int*, int) = nullptr;
};
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

// The job ranks of process set `ps` (0: every rank), ascending; empty for an unknown set.
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

// This rank's position in process set `ps` and the set's size; an error when the set is
// unknown or this rank is not in it.
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

// ---- element types ----------------------------------------------------------------------

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

// The element type as Python spells it (tf.float32.name), for messages about mismatches.
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

char* bytes_of(const tf::Tensor& t) { return const_cast<char*>(t.tensor_data().data()); }

// Multiplies `n` elements at `p` by `factor` as Horovod does: floating point in its own
// precision (half precision through float, rounded once), integers through double and
// truncated.
template <typename T>
void scale_as(void* p, std::size_t n, double factor) {
  auto* v = static_cast<T*>(p);
  if constexpr (std::is_integral_v<T>) {
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<double>(v[i]) * factor);
  } else if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    const float f = static_cast<float>(factor);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<float>(v[i]) * f);
  } else {
    const T f = static_cast<T>(factor);
    for (std::size_t i = 0; i < n; ++i) v[i] *= f;
  }
}

void scale(tf::DataType t, void* p, std::size_t n, double factor) {
  if (factor == 1.0 || n == 0) return;
  switch (t) {
    case tf::DT_INT32:
      return scale_as<std::int32_t>(p, n, factor);
    case tf::DT_INT64:
      return scale_as<std::int64_t>(p, n, factor);
    case tf::DT_FLOAT:
      return scale_as<float>(p, n, factor);
    case tf::DT_DOUBLE:
      return scale_as<double>(p, n, factor);
    case tf::DT_HALF:
      return scale_as<Eigen::half>(p, n, factor);
    case tf::DT_BFLOAT16:
      return scale_as<Eigen::bfloat16>(p, n, factor);
    case tf::DT_UINT8:
      return scale_as<std::uint8_t>(p, n, factor);
    default:
      return;
  }
}

// ---- one kernel invocation and its collectives ------------------------------------------

// One ComputeAsync: its context, TensorFlow's callback, what runs after success
// (postscale, copying out of a fusion or padding buffer) and the buffers the collectives
// use. It finishes when every collective it submitted has finished (so none still writes
// into its outputs), with the first error any of them met.
struct Op {
  tf::OpKernelContext* ctx = nullptr;
  DoneCallback done;
  std::function<void()> finish;
  std::deque<std::vector<char>> buffers;  // a deque: adding one moves none
  std::atomic<int> pending{1};            // submitted steps + 1 while ComputeAsync runs
  std::mutex mu;
  absl::Status status;  // guarded by mu

  std::vector<char>& buffer(std::size_t bytes) { return buffers.emplace_back(bytes); }
  void fail(const absl::Status& st) {
    std::lock_guard lock(mu);
    if (status.ok()) status = st;
  }
  // Drops one reference; the last one finishes the op and deletes it.
  void release() {
    if (pending.fetch_sub(1) != 1) return;
    absl::Status st;
    {
      std::lock_guard lock(mu);
      st = status;
    }
    if (st.ok() && finish) finish();
    if (!st.ok()) ctx->SetStatus(st);
    auto d = std::move(done);
    delete this;
    d();
  }
};

// One submitted collective of an Op; deleted by the completion thread once waited for.
struct Step {
  Op* op = nullptr;
  std::atomic<hvdrun_handle> handle{0};  // 0 until hvdrun_submit_then returned it
  std::atomic<bool> succeeded{false};    // set by `then`
  // Runs on libhvdrun's thread right after success (allgather submits its rows here).
  std::function<absl::Status(long long seq)> next;
};

// The completion thread (see the top of the file). One per process, started on first use.
class Completions {
 public:
  static Completions& get() {
    static auto* c = new Completions;  // never destroyed: ops may finish during exit
    return *c;
  }

  void add(Step* s) {
    std::lock_guard lock(mu_);
    out_.insert(s);
  }
  void forget(Step* s) {
    std::lock_guard lock(mu_);
    out_.erase(s);
  }
  void ready(Step* s) {
    {
      std::lock_guard lock(mu_);
      ready_.push_back(s);
    }
    cv_.notify_one();
  }
  void published() { cv_.notify_one(); }

 private:
  Completions() {
    std::thread([this] { loop(); }).detach();
  }

  void loop() {
    std::unique_lock lock(mu_);
    auto last_poll = std::chrono::steady_clock::now();
    for (;;) {
      cv_.wait_for(lock, std::chrono::milliseconds(2), [&] { return has_published_ready(); });
      std::vector<Step*> batch;
      for (auto it = ready_.begin(); it != ready_.end();) {
        if ((*it)->handle.load() != 0) {
          batch.push_back(*it);
          out_.erase(*it);
          it = ready_.erase(it);
        } else {
          ++it;
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now - last_poll >= std::chrono::milliseconds(2)) {
        last_poll = now;
        for (auto it = out_.begin(); it != out_.end();) {
          Step* s = *it;
          const hvdrun_handle h = s->handle.load();
          // Finished without `then`: failed (`then` runs before the handle completes).
          if (h != 0 && !s->succeeded.load() && g_abi.poll(h) != 0) {
            batch.push_back(s);
            it = out_.erase(it);
          } else {
            ++it;
          }
        }
      }
      lock.unlock();
      for (Step* s : batch) complete(s);
      lock.lock();
    }
  }

  bool has_published_ready() const {
    for (const Step* s : ready_)
      if (s->handle.load() != 0) return true;
    return false;
  }

  // The step's collective has finished: wait its handle (freeing its name), then let go
  // of its op.
  static void complete(Step* s) {
    if (g_abi.wait(s->handle.load()) != 0) s->op->fail(absl::FailedPreconditionError(last_error()));
    Op* op = s->op;
    delete s;
    op->release();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Step*> ready_;
  std::unordered_set<Step*> out_;
};

void on_success(void* arg, long long seq) {
  auto* s = static_cast<Step*>(arg);
  if (s->next) {
    if (absl::Status st = s->next(seq); !st.ok()) s->op->fail(st);
  }
  s->succeeded.store(true);
  Completions::get().ready(s);
}

// Submits `c` as a collective of `op`; `next` runs on success before it completes. A
// collective that cannot be submitted fails the op (which still finishes normally).
void submit(Op* op, const hvdrun_collective& c,
            std::function<absl::Status(long long)> next = nullptr) {
  auto* s = new Step;
  s->op = op;
  s->next = std::move(next);
  op->pending.fetch_add(1);
  Completions::get().add(s);
  const hvdrun_handle h = g_abi.submit_then(&c, sizeof c, on_success, s);
  if (h < 0) {
    op->fail(h == HVDRUN_DUPLICATE_NAME ? absl::InvalidArgumentError(last_error())
                                        : absl::FailedPreconditionError(last_error()));
    Completions::get().forget(s);
    delete s;
    op->release();
    return;
  }
  s->handle.store(h);
  Completions::get().published();
}

// The collective's description; `name`, `shape` and `type_name` must live until it is
// submitted (libhvdrun copies them then).
hvdrun_collective describe(int kind, int dtype, const std::string& name,
                           const std::vector<long long>& shape, const std::string& type_name,
                           int process_set) {
  hvdrun_collective c{};
  c.kind = kind;
  c.process_set = process_set;
  c.dtype = dtype;
  c.name = name.empty() ? nullptr : name.c_str();  // copied by libhvdrun at submission
  c.shape = shape.data();
  c.ndim = static_cast<int>(shape.size());
  c.type_name = type_name.c_str();
  return c;
}

// The name of a composite collective's second step: after the first step's name, or after
// its agreed position among the unnamed collectives of its process set.
std::string step_name(const std::string& base, const char* kind, int ps, long long seq) {
  if (!base.empty()) return base;
  return std::string(kind) + "." + std::to_string(ps) + "." + std::to_string(seq);
}

// The second step of a composite collective: raw bytes, named `name` (which must live
// until it is submitted), in process set `ps`.
hvdrun_collective bytes_step(int kind, const void* send, void* recv, std::size_t count,
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

std::vector<long long> dims_of(const tf::TensorShape& s) {
  std::vector<long long> d;
  for (int i = 0; i < s.dims(); ++i) d.push_back(s.dim_size(i));
  return d;
}

// ---- kernels ----------------------------------------------------------------------------

class Base : public tf::AsyncOpKernel {
 public:
  explicit Base(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &ps_));
  }

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) final {
    if (!g_bound.load()) {
      ctx->SetStatus(not_bound());
      done();
      return;
    }
    auto* op = new Op;
    op->ctx = ctx;
    op->done = std::move(done);
    if (absl::Status st = start(op); !st.ok()) op->fail(st);
    op->release();  // ComputeAsync's own reference
  }

 protected:
  // Submits the invocation's collectives; an error fails the op.
  virtual absl::Status start(Op* op) = 0;

  std::string tensor_name_;
  int ps_ = 0;  // process set: 0 is every rank
};

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
  int op_ = HVDRUN_SUM;
  float prescale_ = 1.0F;
  float postscale_ = 1.0F;
};

// The tensor's bytes per row of its first dimension, after checking it has one; `what`
// and `verb` name the op in the error ("alltoall", "splits").
absl::Status first_dim(const tf::Tensor& in, const char* what, const char* verb,
                       std::size_t* rowbytes) {
  if (in.dims() == 0)
    return absl::InvalidArgumentError(std::string("hvdrun ") + what +
                                      ": the tensor needs at least one dimension (" + what + " " +
                                      verb + " the first); reshape it to [1]");
  *rowbytes = tf::DataTypeSize(in.dtype());
  for (int i = 1; i < in.dims(); ++i) *rowbytes *= in.dim_size(i);
  return absl::OkStatus();
}

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
    const int ctype = widen ? HVDRUN_INT32 : reduce_type(t);
    if (ctype < 0)
      return absl::InvalidArgumentError("hvdrun allreduce: " + type_name_of(t) +
                                        " tensors cannot be reduced");
    const void* send = in.tensor_data().data();
    void* recv = bytes_of(*out);
    const double pre = prescale_, post = postscale_;
    if (widen) {
      auto* w = reinterpret_cast<std::int32_t*>(op->buffer(n * sizeof(std::int32_t)).data());
      for (std::size_t i = 0; i < n; ++i)
        w[i] = t == tf::DT_INT8 ? static_cast<const std::int8_t*>(send)[i]
                                : static_cast<const std::int16_t*>(send)[i];
      scale(tf::DT_INT32, w, n, pre);
      send = recv = w;
      op->finish = [w, out, n, t, post] {
        scale(tf::DT_INT32, w, n, post);
        char* o = bytes_of(*out);
        for (std::size_t i = 0; i < n; ++i) {
          if (t == tf::DT_INT8)
            reinterpret_cast<std::int8_t*>(o)[i] = static_cast<std::int8_t>(w[i]);
          else
            reinterpret_cast<std::int16_t*>(o)[i] = static_cast<std::int16_t>(w[i]);
        }
      };
    } else {
      if (pre != 1.0) {
        if (recv != send) std::memcpy(recv, send, in.TotalBytes());
        scale(t, recv, n, pre);
        send = recv;
      }
      if (post != 1.0) op->finish = [out, n, t, post] { scale(t, bytes_of(*out), n, post); };
    }
    const auto shape = dims_of(in.shape());
    const std::string type_name = type_name_of(t);
    auto c = describe(HVDRUN_KIND_ALLREDUCE, ctype, tensor_name_, shape, type_name, ps_);
    c.send = send;
    c.recv = recv;
    c.count = n;
    c.op = op_;
    c.prescale = pre;
    c.postscale = post;
    submit(op, c);
    return absl::OkStatus();
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
    const int ctype = reduce_type(t);
    if (ctype < 0)
      return absl::InvalidArgumentError("hvdrun grouped_allreduce: " + type_name_of(t) +
                                        " tensors cannot be reduced");
    std::vector<tf::Tensor*> outs(k);
    for (int i = 0; i < k; ++i) {
      TF_RETURN_IF_ERROR(
          ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &outs[i]));
    }
    const auto buckets = plan(op, outs);
    const double pre = prescale_, post = postscale_;
    op->finish = [buckets, outs, t, post] {
      for (const Bucket& b : buckets) {
        if (b.fused == nullptr) {
          scale(t, bytes_of(*outs[b.first]), b.count, post);
          continue;
        }
        scale(t, b.fused, b.count, post);
        std::size_t at = 0;
        for (int i = b.first; i < b.last; ++i) {
          std::memcpy(bytes_of(*outs[i]), b.fused + at, outs[i]->TotalBytes());
          at += outs[i]->TotalBytes();
        }
      }
    };
    const std::string type_name = type_name_of(t);
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const Bucket& bk = buckets[b];
      void* recv = bk.fused;
      const void* send = bk.fused;
      if (recv == nullptr) {  // a single tensor: from its input into its output
        send = ctx->input(bk.first).tensor_data().data();
        recv = bytes_of(*outs[bk.first]);
        if (pre != 1.0 && recv != send) {
          std::memcpy(recv, send, outs[bk.first]->TotalBytes());
          send = recv;
        }
      }
      if (send == recv) scale(t, recv, bk.count, pre);
      const std::string name =
          tensor_name_.empty() ? std::string() : tensor_name_ + "." + std::to_string(b);
      const std::vector<long long> shape = {static_cast<long long>(bk.count)};
      auto c = describe(HVDRUN_KIND_ALLREDUCE, ctype, name, shape, type_name, ps_);
      c.send = send;
      c.recv = recv;
      c.count = bk.count;
      c.op = op_;
      c.prescale = pre;
      c.postscale = post;
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
    const auto shape = dims_of(in.shape());
    const std::string type_name = type_name_of(in.dtype());
    auto c = describe(HVDRUN_KIND_BROADCAST, HVDRUN_UINT8, tensor_name_, shape, type_name, ps_);
    c.recv = bytes_of(*out);
    c.count = in.TotalBytes();
    c.root = root_;
    submit(op, c);
    return absl::OkStatus();
  }

  int root_ = 0;
};

// Allgather along the first dimension (which may differ between ranks): the ranks' first
// dimensions first (the whole shape is agreed there), then the rows padded to the longest
// rank's, submitted from the first step's `then` so it takes the same place in the agreed
// order on every rank (hvdrun.torch's allgather does the same).
class Allgather : public Base {
 public:
  explicit Allgather(tf::OpKernelConstruction* c) : Base(c) {}

 private:
  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& in = ctx->input(0);
    std::size_t rowbytes = 0;
    TF_RETURN_IF_ERROR(first_dim(in, "allgather", "concatenates along", &rowbytes));
    int me = 0, n = 0;
    TF_RETURN_IF_ERROR(place_in(ps_, &me, &n, "allgather"));
    const long long rows = in.dim_size(0);
    auto* mine = reinterpret_cast<long long*>(op->buffer(sizeof(long long)).data());
    *mine = rows;
    auto* firsts = reinterpret_cast<long long*>(op->buffer(sizeof(long long) * n).data());
    const auto shape = dims_of(in.shape());
    const std::string type_name = type_name_of(in.dtype());
    auto c = describe(HVDRUN_KIND_ALLGATHER, HVDRUN_INT64, tensor_name_, shape, type_name, ps_);
    c.send = mine;
    c.recv = firsts;
    c.count = 1;
    const std::string base = tensor_name_;
    const int ps = ps_;
    submit(op, c, [op, firsts, n, rowbytes, base, ps](long long seq) {
      return gather_rows(op, firsts, n, rowbytes, ps,
                         step_name(base, "allgather", ps, seq) + ".data");
    });
    return absl::OkStatus();
  }

  // The second step, on libhvdrun's thread once every rank's first dimension is known.
  static absl::Status gather_rows(Op* op, const long long* firsts, int n, std::size_t rowbytes,
                                  int ps, const std::string& name) {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& src = ctx->input(0);
    long long total = 0, biggest = 0;
    for (int r = 0; r < n; ++r) {
      total += firsts[r];
      biggest = std::max(biggest, firsts[r]);
    }
    tf::TensorShape shape = src.shape();
    shape.set_dim(0, total);
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &out));
    if (biggest == 0 || rowbytes == 0) return absl::OkStatus();
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
// the rows, submitted from the first step's `then` so that each rank can size its output
// (hvdrun.torch's alltoall does the same). Outputs: the rows received, in rank order, and
// how many came from each rank.
class Alltoall : public Base {
 public:
  explicit Alltoall(tf::OpKernelConstruction* c) : Base(c) {}

 private:
  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& in = ctx->input(0);
    const tf::Tensor& splits = ctx->input(1);
    std::size_t rowbytes = 0;
    TF_RETURN_IF_ERROR(first_dim(in, "alltoall", "splits", &rowbytes));
    int me = 0, n = 0;
    TF_RETURN_IF_ERROR(place_in(ps_, &me, &n, "alltoall"));
    const long long rows = in.dim_size(0);
    auto* send_rows = reinterpret_cast<long long*>(op->buffer(sizeof(long long) * n).data());
    if (splits.NumElements() == 0) {
      if (rows % n != 0)
        return absl::InvalidArgumentError("hvdrun alltoall: the first dimension (" +
                                          std::to_string(rows) +
                                          ") cannot be split equally among " + std::to_string(n) +
                                          " ranks; pass splits (rows for each rank)");
      for (int r = 0; r < n; ++r) send_rows[r] = rows / n;
    } else {
      if (splits.dims() != 1 || splits.NumElements() != n)
        return absl::InvalidArgumentError(
            "hvdrun alltoall: splits has " + splits.shape().DebugString() +
            " entries; give one per rank (" + std::to_string(n) + ")");
      long long sum = 0;
      for (int r = 0; r < n; ++r) {
        send_rows[r] = splits.flat<std::int32_t>()(r);
        if (send_rows[r] < 0)
          return absl::InvalidArgumentError("hvdrun alltoall: splits has a negative entry");
        sum += send_rows[r];
      }
      if (sum > rows)
        return absl::InvalidArgumentError(
            "hvdrun alltoall: splits add up to " + std::to_string(sum) +
            " rows but the tensor's first dimension is " + std::to_string(rows));
    }
    auto* table = reinterpret_cast<long long*>(op->buffer(sizeof(long long) * n * n).data());
    const auto shape = dims_of(in.shape());
    const std::string type_name = type_name_of(in.dtype());
    auto c = describe(HVDRUN_KIND_ALLGATHER, HVDRUN_INT64, tensor_name_, shape, type_name, ps_);
    c.send = send_rows;
    c.recv = table;
    c.count = n;
    const std::string base = tensor_name_;
    const int ps = ps_;
    submit(op, c, [op, send_rows, table, me, n, rowbytes, base, ps](long long seq) {
      return exchange(op, send_rows, table, me, n, rowbytes, ps,
                      step_name(base, "alltoall", ps, seq) + ".rows");
    });
    return absl::OkStatus();
  }

  // The second step, on libhvdrun's thread once every rank's splits are known.
  static absl::Status exchange(Op* op, const long long* send_rows, const long long* table, int me,
                               int n, std::size_t rowbytes, int ps, const std::string& name) {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& src = ctx->input(0);
    long long total = 0, moving = 0;
    tf::Tensor* received = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(1, tf::TensorShape({n}), &received));
    for (int r = 0; r < n; ++r) {
      const long long from = table[static_cast<std::size_t>(r) * n + me];
      received->flat<std::int32_t>()(r) = static_cast<std::int32_t>(from);
      total += from;
    }
    for (int i = 0; i < n * n; ++i) moving += table[i];
    tf::TensorShape shape = src.shape();
    shape.set_dim(0, total);
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &out));
    if (rowbytes == 0 || moving == 0) return absl::OkStatus();  // every rank skips alike
    auto* bytes = reinterpret_cast<long long*>(op->buffer(sizeof(long long) * n).data());
    auto* got = reinterpret_cast<long long*>(op->buffer(sizeof(long long) * n).data());
    long long sent = 0;
    for (int r = 0; r < n; ++r) {
      bytes[r] = send_rows[r] * static_cast<long long>(rowbytes);
      sent += bytes[r];
    }
    auto d = bytes_step(HVDRUN_KIND_ALLTOALL, src.tensor_data().data(), bytes_of(*out),
                        static_cast<std::size_t>(sent), name, ps);
    d.splits = bytes;
    d.received_splits = got;
    d.recv_count = out->TotalBytes();
    submit(op, d);
    return absl::OkStatus();
  }
};

// Reducescatter along the first dimension: the tensor reduced over the ranks, each rank
// keeping its slice (ranks below rows % n get one row more, as in Horovod). Scale
// factors are applied here (libhvdrun only agrees on them), Average's division by
// libhvdrun.
class Reducescatter : public Reducing {
 public:
  explicit Reducescatter(tf::OpKernelConstruction* c) : Reducing(c) {}

 private:
  absl::Status start(Op* op) override {
    tf::OpKernelContext* ctx = op->ctx;
    const tf::Tensor& in = ctx->input(0);
    const tf::DataType t = in.dtype();
    std::size_t rowbytes = 0;
    TF_RETURN_IF_ERROR(first_dim(in, "reducescatter", "splits", &rowbytes));
    const int ctype = reduce_type(t);
    if (ctype < 0)
      return absl::InvalidArgumentError("hvdrun reducescatter: " + type_name_of(t) +
                                        " tensors cannot be reduced");
    int me = 0, n = 0;
    TF_RETURN_IF_ERROR(place_in(ps_, &me, &n, "reducescatter"));
    const long long rows = in.dim_size(0);
    tf::TensorShape shape = in.shape();
    shape.set_dim(0, rows / n + (me < rows % n ? 1 : 0));
    tf::Tensor* out = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &out));
    const auto count = static_cast<std::size_t>(in.NumElements());
    const void* send = in.tensor_data().data();
    if (prescale_ != 1.0F && count > 0) {
      char* scaled = op->buffer(in.TotalBytes()).data();
      std::memcpy(scaled, send, in.TotalBytes());
      scale(t, scaled, count, prescale_);
      send = scaled;
    }
    const double post = postscale_;
    const auto mine = static_cast<std::size_t>(out->NumElements());
    if (post != 1.0) op->finish = [out, mine, t, post] { scale(t, bytes_of(*out), mine, post); };
    // libhvdrun reads the shape again when it splits the result (after submission), so
    // it lives as long as the op.
    auto& dims_buf = op->buffer(sizeof(long long) * std::max(in.dims(), 1));
    std::vector<long long> dims = dims_of(in.shape());
    std::memcpy(dims_buf.data(), dims.data(), sizeof(long long) * dims.size());
    const std::string type_name = type_name_of(t);
    auto c = describe(HVDRUN_KIND_REDUCESCATTER, ctype, tensor_name_, dims, type_name, ps_);
    c.shape = reinterpret_cast<const long long*>(dims_buf.data());
    c.send = send;
    c.recv = bytes_of(*out);
    c.count = count;
    c.op = op_;
    c.prescale = prescale_;
    c.postscale = postscale_;
    submit(op, c);
    return absl::OkStatus();
  }
};

// rank(), size() and the like at graph execution time.
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

absl::Status same_shape(tf::shape_inference::InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
  return absl::OkStatus();
}

absl::Status scalar_shape(tf::shape_inference::InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

absl::Status alltoall_shape(tf::shape_inference::InferenceContext* c) {
  tf::shape_inference::ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  c->set_output(1, c->Vector(c->UnknownDim()));
  return absl::OkStatus();
}

absl::Status gathered_shape(tf::shape_inference::InferenceContext* c) {
  tf::shape_inference::ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

}  // namespace
}  // namespace hvdrun_tf

// The element types each op accepts (broadcast and allgather move any fixed-size type).
#define HVDRUN_TF_REDUCIBLE \
  "{uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64}"
#define HVDRUN_TF_MOVABLE                                                                   \
  "{uint8, int8, uint16, int16, int32, uint32, int64, uint64, float16, bfloat16, float32, " \
  "float64, bool, complex64, complex128}"

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
    .Attr("T: {uint8, int32, int64, float16, bfloat16, float32, float64}")
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

REGISTER_OP("HvdrunReducescatter")
    .Attr("T: {uint8, int32, int64, float16, bfloat16, float32, float64}")
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

REGISTER_OP("HvdrunQuery")
    .Attr("which: int")
    .Attr("process_set_id: int = 0")
    .Output("value: int32")
    .SetIsStateful()
    .SetShapeFn(hvdrun_tf::scalar_shape);
REGISTER_KERNEL_BUILDER(Name("HvdrunQuery").Device(::tensorflow::DEVICE_CPU), hvdrun_tf::Query);

// Python (hvdrun/tensorflow/_ops.py) passes the addresses of the C ABI functions of the
// libhvdrun it loaded. Returns 0.
extern "C" __attribute__((visibility("default"))) int hvdrun_tf_bind(void** fns, int count) {
  using hvdrun_tf::g_abi;
  if (count != 11) return -1;
  g_abi.submit_then = reinterpret_cast<decltype(g_abi.submit_then)>(fns[0]);
  g_abi.wait = reinterpret_cast<decltype(g_abi.wait)>(fns[1]);
  g_abi.poll = reinterpret_cast<decltype(g_abi.poll)>(fns[2]);
  g_abi.last_error = reinterpret_cast<decltype(g_abi.last_error)>(fns[3]);
  for (int i = 0; i < 6; ++i) g_abi.query[i] = reinterpret_cast<int (*)()>(fns[4 + i]);
  g_abi.process_set_ranks = reinterpret_cast<decltype(g_abi.process_set_ranks)>(fns[10]);
  hvdrun_tf::g_bound.store(true);
  return 0;
}
