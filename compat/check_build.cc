// The --check-build report. Versions known at build time come from the headers
// (nccl.h, cuda_runtime_api.h, gloo/config.h); what is installed at run time is probed
// with dlopen so that the report tells "built with NCCL 2.x but no libnccl here" apart.
#include "compat/check_build.h"

#include <dlfcn.h>

#include <gloo/config.h>

#include <string>

#include "common/version.h"

#ifdef HVDRUN_HAVE_NCCL
#include <nccl.h>
#endif
#if defined(HVDRUN_HAVE_NCCL) && defined(HVDRUN_HAVE_CUDART_HEADER)
#include <cuda_runtime_api.h>
#endif

namespace hvdrun::compat {
namespace {

/// A library opened with dlopen for the duration of one probe.
class DlLibrary {
 public:
  explicit DlLibrary(std::initializer_list<const char*> names) {
    for (const char* name : names) {
      handle_ = ::dlopen(name, RTLD_LAZY | RTLD_LOCAL);
      if (handle_ != nullptr) return;
    }
  }
  ~DlLibrary() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  DlLibrary(const DlLibrary&) = delete;
  DlLibrary& operator=(const DlLibrary&) = delete;

  explicit operator bool() const { return handle_ != nullptr; }
  template <typename Fn>
  Fn symbol(const char* name) const {
    return handle_ == nullptr ? nullptr : reinterpret_cast<Fn>(::dlsym(handle_, name));
  }

 private:
  void* handle_ = nullptr;
};

/// NCCL encodes versions as major*10000 + minor*100 + patch since 2.9 (major*1000 +
/// minor*100 + patch before).
std::string nccl_version_string(int code) {
  int major = 0, minor = 0, patch = 0;
  if (code >= 20900) {
    major = code / 10000;
    minor = (code % 10000) / 100;
    patch = code % 100;
  } else {
    major = code / 1000;
    minor = (code % 1000) / 100;
    patch = code % 100;
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

/// CUDA encodes versions as major*1000 + minor*10.
std::string cuda_version_string(int code) {
  return std::to_string(code / 1000) + "." + std::to_string((code % 1000) / 10);
}

// Unused in a build without nccl.h (the report then says so instead).
[[maybe_unused]] std::string nccl_runtime() {
  DlLibrary lib({"libnccl.so.2", "libnccl.so"});
  if (!lib) return "libnccl.so.2 not found on this host";
  auto get_version = lib.symbol<int (*)(int*)>("ncclGetVersion");
  int code = 0;
  if (get_version == nullptr || get_version(&code) != 0)
    return "libnccl.so.2 found, version unknown";
  return "libnccl " + nccl_version_string(code) + " installed";
}

[[maybe_unused]] std::string cudart_runtime() {
  DlLibrary lib({"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"});
  if (!lib) return "libcudart not found on this host";
  auto runtime_version = lib.symbol<int (*)(int*)>("cudaRuntimeGetVersion");
  auto device_count = lib.symbol<int (*)(int*)>("cudaGetDeviceCount");
  std::string out = "libcudart";
  int code = 0;
  if (runtime_version != nullptr && runtime_version(&code) == 0) {
    out += " " + cuda_version_string(code);
  }
  out += " installed";
  int devices = 0;
  if (device_count != nullptr && device_count(&devices) == 0) {
    out += ", " + std::to_string(devices) + " GPU" + (devices == 1 ? "" : "s") + " visible";
  } else {
    out += ", no usable GPU or driver";
  }
  return out;
}

std::string mark(bool on) { return on ? "    [X] " : "    [ ] "; }

}  // namespace

std::string check_build_report() {
  std::string r;
  r += std::string("hvdrun v") + kVersionString + ":\n\n";

  r += "Available Frameworks:\n";
  r += mark(true) + "Any program (libhvdrun C++ API and C ABI)\n";
  r += mark(true) + "PyTorch (torch.distributed env://)\n";
  r += mark(true) + "Horovod (gloo controller)\n";

  r += "\nAvailable Controllers:\n";
  r += mark(true) + "hvdrun rendezvous (TCP, per-job secret)\n";
  r += mark(true) + "Gloo (Horovod HTTP rendezvous)\n";
  r += mark(false) + "MPI\n";

  r += "\nAvailable Tensor Operations:\n";
#ifdef HVDRUN_HAVE_NCCL
  r += mark(true) + "NCCL " + nccl_version_string(NCCL_VERSION_CODE) + " (built with nccl.h; " +
       nccl_runtime() + ")\n";
#else
  r += mark(false) + "NCCL (not built: HVDRUN_WITH_NCCL=OFF or no nccl.h at configure time)\n";
#endif
  r += mark(true) + "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." +
       std::to_string(GLOO_VERSION_MINOR) + "." + std::to_string(GLOO_VERSION_PATCH) + "\n";
  r += mark(false) + "MPI\n";
  r += mark(false) + "DDL\n";
  r += mark(false) + "CCL\n";

  r += "\nAvailable Runtimes:\n";
  // libhvdrun touches CUDA only through its NCCL path.
#if defined(HVDRUN_HAVE_NCCL) && defined(HVDRUN_HAVE_CUDART_HEADER)
  r += mark(true) + "CUDA runtime " + cuda_version_string(CUDART_VERSION) + " (built against; " +
       cudart_runtime() + ")\n";
#else
  r += mark(false) + "CUDA runtime (not built)\n";
#endif

  r += "\nCompatibility Layers:\n";
  r += mark(true) + "Horovod gloo mode: HTTP rendezvous, HOROVOD_* variables\n";
  r += mark(true) + "torch.distributed env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...\n";
  return r;
}

}  // namespace hvdrun::compat
