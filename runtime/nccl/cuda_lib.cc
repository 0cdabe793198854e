// The CUDA runtime's entry points, loaded with dlopen (see cuda_lib.h).
#include "runtime/nccl/cuda_lib.h"

#include <dlfcn.h>

#include "runtime/nccl/nccl_comm.h"

namespace hvdrun::runtime {

void* open_first(std::initializer_list<const char*> names, std::string* why) {
  std::string errs;
  for (const char* n : names) {
    if (void* h = ::dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
    errs += std::string(errs.empty() ? "" : "; ") + ::dlerror();
  }
  if (why) *why = errs;
  return nullptr;
}

const Cuda& Cuda::get() {
  static Cuda c = [] {
    Cuda x;
    void* h = open_first(
        {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}, &x.why);
    if (!h) {
      x.why = "CUDA runtime not found (" + x.why + ")";
      return x;
    }
    x.get_device_count = reinterpret_cast<CountFn>(::dlsym(h, "cudaGetDeviceCount"));
    x.set_device = reinterpret_cast<SetFn>(::dlsym(h, "cudaSetDevice"));
    x.error_string = reinterpret_cast<ErrFn>(::dlsym(h, "cudaGetErrorString"));
    x.event_create = reinterpret_cast<EventCreateFn>(::dlsym(h, "cudaEventCreateWithFlags"));
    x.event_record = reinterpret_cast<EventRecordFn>(::dlsym(h, "cudaEventRecord"));
    x.event_query = reinterpret_cast<EventFn>(::dlsym(h, "cudaEventQuery"));
    x.event_destroy = reinterpret_cast<EventFn>(::dlsym(h, "cudaEventDestroy"));
    x.malloc = reinterpret_cast<MallocFn>(::dlsym(h, "cudaMalloc"));
    x.free = reinterpret_cast<FreeFn>(::dlsym(h, "cudaFree"));
    x.memcpy = reinterpret_cast<MemcpyFn>(::dlsym(h, "cudaMemcpy"));
    x.stream_synchronize = reinterpret_cast<SyncFn>(::dlsym(h, "cudaStreamSynchronize"));
    if (!x.get_device_count || !x.set_device || !x.error_string || !x.event_create ||
        !x.event_record || !x.event_query || !x.event_destroy) {
      x.get_device_count = nullptr;
      x.why = "the CUDA runtime found lacks cudaGetDeviceCount, cudaSetDevice or the event API";
    }
    return x;
  }();
  return c;
}

int cuda_device_count(std::string* why) {
  const auto& c = Cuda::get();
  if (!c.get_device_count) {
    if (why) *why = c.why;
    return -1;
  }
  int n = 0;
  int rc = c.get_device_count(&n);
  if (rc != 0) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + c.error_string(rc);
    return -1;
  }
  if (n == 0 && why) *why = "no CUDA device is visible";
  return n;
}

}  // namespace hvdrun::runtime
