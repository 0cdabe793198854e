// One kernel invocation (Op), the submission of its collectives to libhvdrun, the
// completion thread that finishes them, and the kernels' base class (ops_internal.h).
//
// Completion: a collective's `then` callback (libhvdrun's thread, on success only) marks
// its step done and wakes this library's completion thread, which waits the handle (so its
// name is free again before the op's consumers run), finishes the op (postscale, copying
// out of a fusion or padding buffer) and calls TensorFlow's `done`. A failed collective
// never calls `then`: the completion thread polls the handles still out every 2 ms and
// fails their ops with libhvdrun's message.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "hvdrun/hvdrun_c.h"
#include "ops_internal.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace hvdrun_tf {

void Op::fail(const absl::Status& st) {
  std::lock_guard lock(mu);
  if (status.ok()) status = st;
}

void Op::release() {
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

namespace {

// One submitted collective of an Op; deleted by the completion thread once waited for.
struct Step {
  Op* op = nullptr;
  std::atomic<hvdrun_handle> handle{0};  // 0 until hvdrun_submit_then returned it
  std::atomic<bool> succeeded{false};    // set by `then`
  // Runs on libhvdrun's thread right after success (allgather submits its rows here).
  Next next;
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
        take_failed(&batch);
      }
      lock.unlock();
      for (Step* s : batch) complete(s);
      lock.lock();
    }
  }

  // Moves the steps whose collective finished without `then` (failed: `then` runs before
  // the handle completes) from out_ to `batch`. Called with mu_ held.
  void take_failed(std::vector<Step*>* batch) {
    for (auto it = out_.begin(); it != out_.end();) {
      Step* s = *it;
      const hvdrun_handle h = s->handle.load();
      if (h != 0 && !s->succeeded.load() && g_abi.poll(h) != 0) {
        batch->push_back(s);
        it = out_.erase(it);
      } else {
        ++it;
      }
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

}  // namespace

void submit(Op* op, const hvdrun_collective& c, Next next) {
  auto* s = new Step;
  s->op = op;
  s->next = std::move(next);
  op->pending.fetch_add(1);
  Completions::get().add(s);
  const hvdrun_handle h = g_abi.submit_then(&c, sizeof c, on_success, s);
  if (h < 0) {
    const bool invalid = h == HVDRUN_DUPLICATE_NAME || h == HVDRUN_INVALID_ARGUMENT;
    op->fail(invalid ? absl::InvalidArgumentError(last_error())
                     : absl::FailedPreconditionError(last_error()));
    Completions::get().forget(s);
    delete s;
    op->release();
    return;
  }
  s->handle.store(h);
  Completions::get().published();
}

// ---- the kernels' base class ------------------------------------------------------------

Base::Base(tf::OpKernelConstruction* c) : AsyncOpKernel(c) {
  OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &tensor_name_));
  OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &ps_));
}

void Base::ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) {
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

hvdrun_collective Base::describe(Op* op, int kind, int dtype, const std::string& name,
                                 std::vector<long long> shape, tf::DataType t) const {
  hvdrun_collective c{};
  c.kind = kind;
  c.process_set = ps_;
  c.dtype = dtype;
  c.name = name.empty() ? nullptr : op->strings.emplace_back(name).c_str();
  c.ndim = static_cast<int>(shape.size());
  c.shape = op->shapes.emplace_back(std::move(shape)).data();
  c.type_name = op->strings.emplace_back(type_name_of(t)).c_str();
  return c;
}

absl::Status Base::rows_of(const tf::Tensor& in, const char* what, const char* verb,
                           Rows* rows) const {
  if (in.dims() == 0)
    return absl::InvalidArgumentError(std::string("hvdrun ") + what +
                                      ": the tensor needs at least one dimension (" + what + " " +
                                      verb + " the first); reshape it to [1]");
  rows->bytes = tf::DataTypeSize(in.dtype());
  for (int i = 1; i < in.dims(); ++i) rows->bytes *= in.dim_size(i);
  return place_in(ps_, &rows->me, &rows->n, what);
}

}  // namespace hvdrun_tf
