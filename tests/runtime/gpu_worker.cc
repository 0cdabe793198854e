// A rank program for the NCCL path on a real GPU, linked to libhvdrun.so like a user's
// program. The CUDA runtime is loaded at run time (as libhvdrun does), so this builds
// on machines without CUDA and only its GPU scenarios need one.
//
//   gpu_worker check          every dtype x op allreduce on device memory, in place and
//                             not, plus broadcast from the first and last rank and
//                             allgather, all through hvdrun's NCCL communicator
//   gpu_worker bench BYTES... allreduce of float32 buffers of each size; rank 0 prints
//                             "bench <bytes> <seconds per op> <algbw GB/s> <busbw GB/s>"
//   gpu_worker loop [RANK [stop]]
//                             every rank prints "ready" after its first device allreduce,
//                             then runs allreduces for up to 120 s; RANK, when given,
//                             leaves abruptly (_exit 7) once all are ready, or with `stop`
//                             stops itself (SIGSTOP), so the others block inside NCCL (for
//                             the fault tests)
//
// Both print "init <seconds>" on rank 0: hvdrun::init() including the NCCL communicator.
// Exit codes: 0 every check held, 1 a check failed, 3 init failed or NCCL unavailable,
// 4 the CUDA runtime failed.
#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "tests/runtime/collective_checks.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;

namespace {

// The CUDA runtime entry points this program needs, from whichever libcudart is found.
class Cuda {
 public:
  Cuda() {
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"})
      if ((lib_ = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (lib_ == nullptr) throw std::runtime_error("CUDA runtime (libcudart) not found");
    bind(malloc_, "cudaMalloc");
    bind(free_, "cudaFree");
    bind(memcpy_, "cudaMemcpy");
    bind(stream_create_, "cudaStreamCreate");
    bind(stream_sync_, "cudaStreamSynchronize");
    bind(stream_destroy_, "cudaStreamDestroy");
    bind(error_string_, "cudaGetErrorString");
    check(stream_create_(&stream_), "cudaStreamCreate");
  }
  ~Cuda() {
    if (stream_ != nullptr) stream_destroy_(stream_);
    // libcudart stays loaded: NCCL (inside libhvdrun) still uses it until exit.
  }
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;

  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    check(malloc_(&p, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
    return p;
  }
  void release(void* p) { free_(p); }
  void to_device(void* dst, const void* src, std::size_t bytes) {
    check(memcpy_(dst, src, bytes, kHostToDevice), "cudaMemcpy to device");
  }
  void to_host(void* dst, const void* src, std::size_t bytes) {
    check(memcpy_(dst, src, bytes, kDeviceToHost), "cudaMemcpy to host");
  }
  void sync() { check(stream_sync_(stream_), "cudaStreamSynchronize"); }
  void* stream() const { return stream_; }

 private:
  static constexpr int kHostToDevice = 1;
  static constexpr int kDeviceToHost = 2;

  template <typename F>
  void bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(::dlsym(lib_, name));
    if (fn == nullptr) throw std::runtime_error(std::string("libcudart lacks ") + name);
  }
  void check(int rc, const char* what) {
    if (rc != 0) throw std::runtime_error(std::string(what) + ": " + error_string_(rc));
  }

  void* lib_ = nullptr;
  void* stream_ = nullptr;
  int (*malloc_)(void**, std::size_t) = nullptr;
  int (*free_)(void*) = nullptr;
  int (*memcpy_)(void*, const void*, std::size_t, int) = nullptr;
  int (*stream_create_)(void**) = nullptr;
  int (*stream_sync_)(void*) = nullptr;
  int (*stream_destroy_)(void*) = nullptr;
  const char* (*error_string_)(int) = nullptr;
};

// A device buffer that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer(Cuda& cuda, std::size_t bytes) : cuda_(cuda), p_(cuda.alloc(bytes)) {}
  ~DeviceBuffer() { cuda_.release(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  Cuda& cuda_;
  void* p_;
};

// "" when `step` runs through, else what it threw.
template <typename Step>
std::string failure_of(Step&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

void check_device_collectives(Cuda& cuda) {
  // Host buffers go to the GPU, through NCCL, and back; the shared checks compare them.
  hvdrun_test::check_every_dtype(
      [&](const void* send, void* out, std::size_t count, DataType dt, ReduceOp op) {
        return failure_of([&] {
          const std::size_t bytes = count * hvdrun::dtype_size(dt);
          DeviceBuffer dsend(cuda, bytes);
          DeviceBuffer drecv(cuda, bytes);
          cuda.to_device(dsend.get(), send, bytes);
          void* dout = out == send ? dsend.get() : drecv.get();
          hvdrun::allreduce_device(dsend.get(), dout, count, dt, op, cuda.stream());
          cuda.sync();
          cuda.to_host(out, dout, bytes);
          // An out-of-place allreduce must leave the device input alone: bring it back
          // over the host input, which the shared check compares with what was sent.
          if (out != send) cuda.to_host(const_cast<void*>(send), dsend.get(), bytes);
        });
      },
      {1, 7, 40000, 3000000});
  hvdrun_test::check_broadcast(
      [&](void* buf, std::size_t count, DataType dt, int root) {
        return failure_of([&] {
          const std::size_t bytes = count * hvdrun::dtype_size(dt);
          DeviceBuffer d(cuda, bytes);
          cuda.to_device(d.get(), buf, bytes);
          hvdrun::broadcast_device(d.get(), count, dt, root, cuda.stream());
          cuda.sync();
          cuda.to_host(buf, d.get(), bytes);
        });
      },
      100000);
  hvdrun_test::check_allgather(
      [&](const void* send, void* recv, std::size_t count, DataType dt) {
        return failure_of([&] {
          const std::size_t bytes = count * hvdrun::dtype_size(dt);
          const std::size_t all = bytes * static_cast<std::size_t>(hvdrun::size());
          DeviceBuffer dsend(cuda, bytes);
          DeviceBuffer drecv(cuda, all);
          cuda.to_device(dsend.get(), send, bytes);
          hvdrun::allgather_device(dsend.get(), drecv.get(), count, dt, cuda.stream());
          cuda.sync();
          cuda.to_host(recv, drecv.get(), all);
        });
      },
      50000);
}

// Times float32 allreduces of each size: a few warm-ups, then repeats for about 0.5 s
// (at least 5), synchronised on the stream. Every rank runs the same number of
// iterations: rank 0 decides it and broadcasts it over Gloo.
void bench(Cuda& cuda, const std::vector<std::size_t>& sizes) {
  using Clock = std::chrono::steady_clock;
  const int n = hvdrun::size();
  for (std::size_t bytes : sizes) {
    const std::size_t count = bytes / sizeof(float);
    DeviceBuffer buf(cuda, count * sizeof(float));
    std::vector<float> host(count, 1.0f);
    cuda.to_device(buf.get(), host.data(), count * sizeof(float));
    auto one = [&] {
      hvdrun::allreduce_device(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum,
                               cuda.stream());
    };
    for (int i = 0; i < 3; ++i) one();
    cuda.sync();
    auto t0 = Clock::now();
    one();
    cuda.sync();
    double once = std::chrono::duration<double>(Clock::now() - t0).count();
    std::int32_t iters = std::clamp(static_cast<std::int32_t>(0.5 / std::max(once, 1e-6)), 5, 2000);
    hvdrun::broadcast(&iters, 1, DataType::kInt32, 0);
    hvdrun::barrier();
    t0 = Clock::now();
    for (std::int32_t i = 0; i < iters; ++i) one();
    cuda.sync();
    double per_op = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
    double algbw = static_cast<double>(count * sizeof(float)) / per_op / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    if (hvdrun::rank() == 0)
      std::printf("bench %zu %.9f %.3f %.3f\n", count * sizeof(float), per_op, algbw, busbw);
  }
}

// The fault tests' rank: see the header comment.
int loop(Cuda& cuda, int exit_rank, bool stop) {
  const std::size_t count = 1 << 20;
  DeviceBuffer buf(cuda, count * sizeof(float));
  auto one = [&] {
    hvdrun::allreduce_device(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum,
                             cuda.stream());
    cuda.sync();
  };
  one();
  std::printf("ready\n");
  std::fflush(stdout);
  // Every rank has said "ready" before one leaves.
  hvdrun::barrier();
  if (hvdrun::rank() == exit_rank) {
    if (stop) ::raise(SIGSTOP);
    ::_exit(7);
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < end) one();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "check";
  if (scenario != "check" && scenario != "bench" && scenario != "loop") {
    std::fprintf(stderr, "gpu_worker: unknown scenario '%s' (check, bench or loop)\n",
                 scenario.c_str());
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  try {
    hvdrun::init();
  } catch (const hvdrun::Error& e) {
    std::fprintf(stderr, "init failed: %s\n", e.what());
    return 3;
  }
  double init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!hvdrun::nccl_available()) {
    std::fprintf(stderr, "rank %d: NCCL unavailable: %s\n", hvdrun::rank(),
                 hvdrun::nccl_status().c_str());
    return 3;
  }
  if (hvdrun::rank() == 0) std::printf("init %.6f\n", init_s);
  try {
    Cuda cuda;
    if (scenario == "check") {
      check_device_collectives(cuda);
    } else if (scenario == "loop") {
      return loop(cuda, argc > 2 ? static_cast<int>(std::strtol(argv[2], nullptr, 10)) : -1,
                  argc > 3 && std::string(argv[3]) == "stop");
    } else {
      std::vector<std::size_t> sizes;
      for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
      bench(cuda, sizes);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", hvdrun::rank(), e.what());
    return 4;
  }
  const int me = hvdrun::rank();
  hvdrun::shutdown();
  if (hvdrun_test::failures() != 0) {
    std::fprintf(stderr, "rank %d: %d checks failed\n", me, hvdrun_test::failures());
    return 1;
  }
  if (scenario == "check") std::printf("rank %d: device checks passed\n", me);
  return 0;
}
