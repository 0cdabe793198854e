// The C ABI (hvdrun/hvdrun_c.h) over the C++ API: exceptions become return codes and a
// per-thread message, so nothing unwinds into C or Python.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "hvdrun/hvdrun_c.h"
#include "runtime/core/control_link.h"
#include "runtime/engine/engine.h"

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

// Submits an asynchronous collective: its handle, or -1 with the reason kept;
// HVDRUN_DUPLICATE_NAME for a name still in flight, and `invalid` for arguments this rank
// got wrong (hvdrun_collective's functions return HVDRUN_INVALID_ARGUMENT, the older ones
// -1 as they always did).
template <typename Fn>
hvdrun_handle submitted(Fn fn, hvdrun_handle invalid = -1) {
  try {
    hvdrun_handle h = fn();
    g_last_error.clear();
    return h;
  } catch (const hvdrun::runtime::DuplicateName& e) {
    g_last_error = e.what();
    return HVDRUN_DUPLICATE_NAME;
  } catch (const hvdrun::InvalidArgument& e) {
    g_last_error = e.what();
    return invalid;
  } catch (const std::exception& e) {
    g_last_error = e.what();
  } catch (...) {
    g_last_error = "hvdrun: unknown failure";
  }
  return -1;
}

// C and ctypes callers may pass any int where an hvdrun_dtype or hvdrun_op is expected,
// and loading an out-of-range value of a C enum is undefined in C++. So the argument's
// bytes are read (through a reference, which loads nothing) into the C++ enum class,
// whose underlying int holds any value, and the C++ API rejects it with a message.
template <typename To, typename From>
To enum_bits(const From& from) {
  static_assert(sizeof(From) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &from, sizeof v);
  return static_cast<To>(v);
}
hvdrun::DataType to_dtype(const hvdrun_dtype& t) { return enum_bits<hvdrun::DataType>(t); }
hvdrun::ReduceOp to_op(const hvdrun_op& op) { return enum_bits<hvdrun::ReduceOp>(op); }

hvdrun::Collective from_c(const hvdrun_collective* c, size_t size) {
  if (c == nullptr) throw hvdrun::InvalidArgument("hvdrun_submit: null collective");
  // ABI 3 callers end at postscale; the fields after it are then zero.
  constexpr std::size_t kAbi3 = offsetof(hvdrun_collective, splits);
  if (size < kAbi3)
    throw hvdrun::InvalidArgument("hvdrun_submit: hvdrun_collective of " + std::to_string(size) +
                                  " bytes; this library needs " +
                                  std::to_string(sizeof(hvdrun_collective)) +
                                  " (pass sizeof(hvdrun_collective) from hvdrun_c.h)");
  hvdrun_collective full{};
  std::memcpy(&full, c, std::min(size, sizeof full));
  c = &full;
  hvdrun::Collective k;
  k.kind = static_cast<hvdrun::CollectiveKind>(c->kind);
  k.send = c->send;
  k.recv = c->recv;
  k.count = c->count;
  k.dtype = static_cast<hvdrun::DataType>(c->dtype);
  k.op = static_cast<hvdrun::ReduceOp>(c->op);
  k.root = c->root;
  k.device = c->device != 0;
  k.cuda_stream = c->cuda_stream;
  k.name = c->name;
  static_assert(sizeof(long long) == sizeof(std::int64_t));
  k.shape = reinterpret_cast<const std::int64_t*>(c->shape);
  k.ndim = c->ndim;
  k.type_name = c->type_name;
  k.prescale = c->prescale == 0.0 ? 1.0 : c->prescale;
  k.postscale = c->postscale == 0.0 ? 1.0 : c->postscale;
  k.splits = reinterpret_cast<const std::int64_t*>(c->splits);
  k.received_splits = reinterpret_cast<std::int64_t*>(c->received_splits);
  k.recv_count = c->recv_count;
  k.process_set = c->process_set;
  // ABI 6 callers end at process_set and apply the scale factors themselves.
  constexpr std::size_t kAbi7 = offsetof(hvdrun_collective, caller_scales) + sizeof(int);
  k.caller_scales = size < kAbi7 || c->caller_scales != 0;
  return k;
}

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
int hvdrun_is_homogeneous(void) {
  return query([] { return hvdrun::is_homogeneous() ? 1 : 0; });
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

int hvdrun_abi_version(void) { return HVDRUN_ABI_VERSION; }
const char* hvdrun_version(void) { return hvdrun::version(); }
int hvdrun_is_initialized(void) { return hvdrun::is_initialized() ? 1 : 0; }
int hvdrun_generation(void) {
  return query([] { return hvdrun::generation(); });
}
int hvdrun_elastic_declare(void) {
  return query([] { return hvdrun::runtime::declare_elastic(); });
}
int hvdrun_elastic_joining(void) {
  return query([] { return hvdrun::runtime::joining_alone(); });
}
int hvdrun_hosts_updated(void) {
  return query([] { return hvdrun::runtime::pending_host_update(); });
}
int hvdrun_nccl_available(void) {
  if (!hvdrun::is_initialized()) {
    g_last_error = "hvdrun_nccl_available() called before hvdrun_init()";
    return -1;
  }
  return hvdrun::nccl_available() ? 1 : 0;
}
const char* hvdrun_nccl_status(void) {
  thread_local std::string status;
  status = hvdrun::nccl_status();
  return status.c_str();
}

hvdrun_handle hvdrun_allreduce_async(const void* send, void* recv, size_t count, hvdrun_dtype dtype,
                                     hvdrun_op op) {
  return submitted(
      [&] { return hvdrun::allreduce_async(send, recv, count, to_dtype(dtype), to_op(op)); });
}
hvdrun_handle hvdrun_broadcast_async(void* buf, size_t count, hvdrun_dtype dtype, int root) {
  return submitted([&] { return hvdrun::broadcast_async(buf, count, to_dtype(dtype), root); });
}
hvdrun_handle hvdrun_allgather_async(const void* send, void* recv, size_t count,
                                     hvdrun_dtype dtype) {
  return submitted([&] { return hvdrun::allgather_async(send, recv, count, to_dtype(dtype)); });
}
hvdrun_handle hvdrun_barrier_async(void) {
  return submitted([] { return hvdrun::barrier_async(); });
}

hvdrun_handle hvdrun_allreduce_device_async(const void* send, void* recv, size_t count,
                                            hvdrun_dtype dtype, hvdrun_op op, void* stream) {
  return submitted([&] {
    return hvdrun::allreduce_device_async(send, recv, count, to_dtype(dtype), to_op(op), stream);
  });
}
hvdrun_handle hvdrun_broadcast_device_async(void* buf, size_t count, hvdrun_dtype dtype, int root,
                                            void* stream) {
  return submitted(
      [&] { return hvdrun::broadcast_device_async(buf, count, to_dtype(dtype), root, stream); });
}
hvdrun_handle hvdrun_allgather_device_async(const void* send, void* recv, size_t count,
                                            hvdrun_dtype dtype, void* stream) {
  return submitted(
      [&] { return hvdrun::allgather_device_async(send, recv, count, to_dtype(dtype), stream); });
}

int hvdrun_allreduce_device(const void* send, void* recv, size_t count, hvdrun_dtype dtype,
                            hvdrun_op op, void* stream) {
  return guarded(
      [&] { hvdrun::allreduce_device(send, recv, count, to_dtype(dtype), to_op(op), stream); });
}
int hvdrun_broadcast_device(void* buf, size_t count, hvdrun_dtype dtype, int root, void* stream) {
  return guarded([&] { hvdrun::broadcast_device(buf, count, to_dtype(dtype), root, stream); });
}
int hvdrun_allgather_device(const void* send, void* recv, size_t count, hvdrun_dtype dtype,
                            void* stream) {
  return guarded([&] { hvdrun::allgather_device(send, recv, count, to_dtype(dtype), stream); });
}

int hvdrun_poll(hvdrun_handle handle) {
  return query([&] { return hvdrun::poll(handle) ? 1 : 0; });
}
int hvdrun_wait(hvdrun_handle handle) {
  return guarded([&] { hvdrun::wait(handle); });
}
long long hvdrun_pending(void) {
  try {
    return hvdrun::pending();
  } catch (const std::exception& e) {
    g_last_error = e.what();
  }
  return -1;
}
int hvdrun_join(void) {
  return query([] { return hvdrun::join(); });
}

int hvdrun_leave(void) {
  hvdrun::leave();
  return 0;
}

int hvdrun_add_process_set(const int* ranks, int n) {
  try {
    if (n < 0 || (n > 0 && ranks == nullptr))
      throw hvdrun::Error("hvdrun_add_process_set: " + std::to_string(n) + " ranks at null");
    int id = hvdrun::add_process_set(std::vector<int>(ranks, ranks + n));
    g_last_error.clear();
    return id;
  } catch (const hvdrun::DuplicateProcessSet& e) {
    g_last_error = e.what();
    return HVDRUN_DUPLICATE_SET;
  } catch (const std::exception& e) {
    g_last_error = e.what();
  }
  return -1;
}
int hvdrun_remove_process_set(int id) {
  return query([&] { return hvdrun::remove_process_set(id) ? 1 : 0; });
}
int hvdrun_process_set_ranks(int id, int* out, int cap) {
  return query([&] {
    auto ranks = hvdrun::process_set_ranks(id);
    for (std::size_t i = 0; i < ranks.size() && static_cast<int>(i) < cap; ++i) out[i] = ranks[i];
    return static_cast<int>(ranks.size());
  });
}

long long hvdrun_reducescatter_rows(long long rows, int process_set) {
  try {
    return hvdrun::reducescatter_rows(rows, process_set);
  } catch (const std::exception& e) {
    g_last_error = e.what();
  }
  return -1;
}

int hvdrun_start_timeline(const char* path, int mark_cycles) {
  return guarded([&] {
    if (path == nullptr || *path == '\0') throw hvdrun::Error("hvdrun_start_timeline: no path");
    hvdrun::start_timeline(path, mark_cycles != 0);
  });
}
int hvdrun_stop_timeline(void) {
  return guarded([] { hvdrun::stop_timeline(); });
}

hvdrun_handle hvdrun_submit(const hvdrun_collective* c, size_t size) {
  return submitted([&] { return hvdrun::submit(from_c(c, size)); }, HVDRUN_INVALID_ARGUMENT);
}
hvdrun_handle hvdrun_submit_then(const hvdrun_collective* c, size_t size,
                                 void (*then)(void*, long long), void* arg) {
  return submitted([&] { return hvdrun::submit(from_c(c, size), then, arg); },
                   HVDRUN_INVALID_ARGUMENT);
}
int hvdrun_run(const hvdrun_collective* c, size_t size) {
  return submitted(
      [&] {
        hvdrun::run(from_c(c, size));
        return 0;
      },
      HVDRUN_INVALID_ARGUMENT);
}
long long hvdrun_sequence(hvdrun_handle handle) {
  try {
    return hvdrun::sequence(handle);
  } catch (const std::exception& e) {
    g_last_error = e.what();
  }
  return -2;
}

}  // extern "C"
