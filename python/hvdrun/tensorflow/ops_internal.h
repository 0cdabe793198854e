// What the op library's sources share (ops.cc opens with the map of them): the C ABI as
// hvdrun_tf_bind received it, element types and scaling (ops.cc), one kernel invocation
// (Op) and the submission of its collectives (ops_submit.cc), and the kernels' base class.
// Nothing here leaves the library: it is built with -fvisibility=hidden, and its one
// exported symbol is hvdrun_tf_bind.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "hvdrun/hvdrun_c.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hvdrun_tf {

namespace tf = ::tensorflow;
using DoneCallback = tf::AsyncOpKernel::DoneCallback;

// ---- the C ABI, as hvdrun._lib loaded it (ops.cc) ---------------------------------------

struct Abi {
  hvdrun_handle (*submit_then)(const hvdrun_collective*, size_t, void (*)(void*, long long),
                               void*) = nullptr;
  int (*wait)(hvdrun_handle) = nullptr;
  int (*poll)(hvdrun_handle) = nullptr;
  const char* (*last_error)() = nullptr;
  int (*query[6])() = {};  // rank, size, local_rank, local_size, cross_rank, cross_size
  int (*process_set_ranks)(int, int*, int) = nullptr;
  long long (*reducescatter_rows)(long long, int) = nullptr;
};
extern Abi g_abi;
extern std::atomic<bool> g_bound;  // set once hvdrun_tf_bind has filled g_abi

// The error of a kernel run before Python bound the library.
absl::Status not_bound();
// libhvdrun's message for the call that just failed on this thread.
std::string last_error();
// The job ranks of process set `ps` (0: every rank), ascending; empty for an unknown set.
std::vector<int> members(int ps);
// This rank's position in process set `ps` and the set's size; an error when the set is
// unknown or this rank is not in it. `what` names the op in the error.
absl::Status place_in(int ps, int* me, int* n, const char* what);

// ---- element types and tensors (ops.cc) -------------------------------------------------

// libhvdrun's element type for `t` in *ctype; an error naming the op (`what`) when
// libhvdrun cannot reduce it.
absl::Status reduced_type(tf::DataType t, const char* what, int* ctype);
// The element type as Python spells it (tf.float32.name), for messages about mismatches.
std::string type_name_of(tf::DataType t);

// The tensor's bytes, for libhvdrun to read or write (TensorFlow hands out const data).
inline char* bytes_of(const tf::Tensor& t) { return const_cast<char*>(t.tensor_data().data()); }
// The shape as the C ABI takes it.
std::vector<long long> dims_of(const tf::TensorShape& s);

// Shape functions of more than one op.
absl::Status same_shape(tf::shape_inference::InferenceContext* c);
absl::Status gathered_shape(tf::shape_inference::InferenceContext* c);

// ---- one kernel invocation and its collectives (ops_submit.cc) --------------------------

// One ComputeAsync: its context, TensorFlow's callback, what runs after success
// (postscale, copying out of a fusion or padding buffer) and the memory its collectives
// use. It finishes when every collective it submitted has finished (so none still writes
// into its outputs), with the first error any of them met.
struct Op {
  tf::OpKernelContext* ctx = nullptr;
  DoneCallback done;
  std::function<void()> finish;
  // Deques: adding one moves none, so what was handed to libhvdrun stays put.
  std::deque<std::vector<char>> buffers;
  std::deque<std::vector<long long>> shapes;
  std::deque<std::string> strings;
  std::atomic<int> pending{1};  // submitted steps + 1 while ComputeAsync runs
  std::mutex mu;
  absl::Status status;  // guarded by mu

  std::vector<char>& buffer(std::size_t bytes) { return buffers.emplace_back(bytes); }
  // `n` elements of T, zeroed, living as long as the op.
  template <typename T>
  T* array(std::size_t n) {
    return reinterpret_cast<T*>(buffer(sizeof(T) * n).data());
  }
  void fail(const absl::Status& st);
  // Drops one reference; the last one finishes the op and deletes it.
  void release();
};

// What runs on libhvdrun's thread when a collective succeeded, before it completes; its
// argument is the collective's agreed position among the unnamed ones of its process set.
using Next = std::function<absl::Status(long long seq)>;

// Submits `c` as a collective of `op`; `next` runs on success before it completes. A
// collective that cannot be submitted fails the op (which still finishes normally).
void submit(Op* op, const hvdrun_collective& c, Next next = nullptr);

// An asynchronous kernel with the attrs every collective has (tensor_name,
// process_set_id): ComputeAsync makes an Op, and start() submits its collectives.
class Base : public tf::AsyncOpKernel {
 public:
  explicit Base(tf::OpKernelConstruction* c);

  void ComputeAsync(tf::OpKernelContext* ctx, DoneCallback done) final;

 protected:
  // Submits the invocation's collectives; an error fails the op.
  virtual absl::Status start(Op* op) = 0;

  // The collective's description: `kind` of `dtype` elements, named `name` (empty: matched
  // by order among the unnamed collectives), with the tensor's shape and its element type
  // as Python spells it (`t`), in this kernel's process set. What it points to lives as
  // long as `op`: libhvdrun copies the name at submission, but reads reducescatter's shape
  // again when it splits the result.
  hvdrun_collective describe(Op* op, int kind, int dtype, const std::string& name,
                             std::vector<long long> shape, tf::DataType t) const;

  // How a collective along the first dimension lays out: the tensor's bytes per row,
  // this rank's place in the process set and the set's size.
  struct Rows {
    std::size_t bytes = 0;
    int me = 0;
    int n = 0;
  };
  // The rows of `in`, which must have a first dimension; `what` and `verb` name the op
  // in the errors ("alltoall", "splits").
  absl::Status rows_of(const tf::Tensor& in, const char* what, const char* verb, Rows* rows) const;

  std::string tensor_name_;
  int ps_ = 0;  // process set: 0 is every rank
};

}  // namespace hvdrun_tf
