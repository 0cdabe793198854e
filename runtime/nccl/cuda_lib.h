// The CUDA runtime, loaded at run time (dlopen) so that libhvdrun works on hosts without
// CUDA: the few entry points the NCCL communicator needs, resolved once.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace hvdrun::runtime {

/// dlopen()s the first of `names` that loads (RTLD_NOW | RTLD_LOCAL); nullptr when none
/// does, with every failure in `why`.
void* open_first(std::initializer_list<const char*> names, std::string* why);

/// The few CUDA runtime entry points needed, resolved once. A null get_device_count
/// means CUDA is unusable here; `why` says why.
struct Cuda {
  using CountFn = int (*)(int*);
  using SetFn = int (*)(int);
  using ErrFn = const char* (*)(int);
  using EventCreateFn = int (*)(void**, unsigned);
  using EventRecordFn = int (*)(void*, void*);
  using EventFn = int (*)(void*);
  CountFn get_device_count = nullptr;
  SetFn set_device = nullptr;
  ErrFn error_string = nullptr;
  // For the device watchdog: an event recorded after each collective.
  EventCreateFn event_create = nullptr;
  EventRecordFn event_record = nullptr;
  EventFn event_query = nullptr;
  EventFn event_destroy = nullptr;
  // For a joined rank's stand-in (optional: without them it cannot stand in on a GPU).
  using MallocFn = int (*)(void**, std::size_t);
  using FreeFn = int (*)(void*);
  using MemcpyFn = int (*)(void*, const void*, std::size_t, int);
  using SyncFn = int (*)(void*);
  MallocFn malloc = nullptr;
  FreeFn free = nullptr;
  MemcpyFn memcpy = nullptr;
  SyncFn stream_synchronize = nullptr;
  std::string why;

  /// The process's one instance, loaded on first use.
  static const Cuda& get();
};

}  // namespace hvdrun::runtime
