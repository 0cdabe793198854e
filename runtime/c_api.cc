// The C ABI (hvdrun/hvdrun_c.h) over the C++ API: exceptions become return codes and a
// per-thread message, so nothing unwinds into C or Python.
#include <string>

#include "hvdrun/hvdrun.h"
#include "hvdrun/hvdrun_c.h"

namespace {

thread_local std::string g_last_error;

template <typename Fn>
int guarded(Fn fn) {
  try {
    fn();
    g_last_error.clear();
    return 0;
  } catch (const std::exception& e) {
    g_last_error = e.what();
  } catch (...) {
    g_last_error = "hvdrun: unknown failure";
  }
  return -1;
}

template <typename Fn>
int query(Fn fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    g_last_error = e.what();
  }
  return -1;
}

hvdrun::DataType to_dtype(hvdrun_dtype t) { return static_cast<hvdrun::DataType>(t); }
hvdrun::ReduceOp to_op(hvdrun_op op) { return static_cast<hvdrun::ReduceOp>(op); }

}  // namespace

extern "C" {

int hvdrun_init(void) {
  return guarded([] { hvdrun::init(); });
}
int hvdrun_rank(void) {
  return query([] { return hvdrun::rank(); });
}
int hvdrun_size(void) {
  return query([] { return hvdrun::size(); });
}
int hvdrun_local_rank(void) {
  return query([] { return hvdrun::local_rank(); });
}
int hvdrun_local_size(void) {
  return query([] { return hvdrun::local_size(); });
}
int hvdrun_cross_rank(void) {
  return query([] { return hvdrun::cross_rank(); });
}
int hvdrun_cross_size(void) {
  return query([] { return hvdrun::cross_size(); });
}

int hvdrun_allreduce(const void* send, void* recv, size_t count, hvdrun_dtype dtype, hvdrun_op op) {
  return guarded([&] { hvdrun::allreduce(send, recv, count, to_dtype(dtype), to_op(op)); });
}

int hvdrun_broadcast(void* buf, size_t count, hvdrun_dtype dtype, int root) {
  return guarded([&] { hvdrun::broadcast(buf, count, to_dtype(dtype), root); });
}

int hvdrun_allgather(const void* send, void* recv, size_t count, hvdrun_dtype dtype) {
  return guarded([&] { hvdrun::allgather(send, recv, count, to_dtype(dtype)); });
}

int hvdrun_barrier(void) {
  return guarded([] { hvdrun::barrier(); });
}
int hvdrun_shutdown(void) {
  return guarded([] { hvdrun::shutdown(); });
}
const char* hvdrun_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
