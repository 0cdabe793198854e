// Speed of the frame MAC (rendezvous/gmac.h) against the rendezvous HMAC-SHA256, on one
// core, over 1 MiB messages. Prints one line per MAC in GB/s of this thread's CPU time.
// Usage: hvdrun_gmac_bench [MiB to hash, default 256]
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "rendezvous/gmac.h"
#include "rendezvous/protocol.h"

namespace {

// This thread's CPU seconds: on a shared machine, wall time would measure the load.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

template <typename F>
double gbps(std::size_t total, std::size_t chunk, F&& f) {
  const double t0 = cpu_seconds();
  for (std::size_t done = 0; done < total; done += chunk) f();
  return static_cast<double>(total) / (cpu_seconds() - t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hvdrun::rendezvous;
  const std::size_t total = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256) << 20;
  const std::size_t chunk = 1 << 20;
  std::vector<unsigned char> buf(chunk, 0x5a);
  std::array<unsigned char, 16> key{};
  std::array<unsigned char, 12> iv{};
  GmacKey k(key.data());
  unsigned sink = 0;
  const double gmac = gbps(total, chunk, [&] { sink += k.tag(iv.data(), buf.data(), chunk)[0]; });
  std::array<unsigned char, 16> state{}, h{};
  const double portable = gbps(total / 64, chunk, [&] {
    gmac_detail::ghash_portable(state.data(), h.data(), buf.data(), chunk);
    sink += state[0];
  });
  Hmac hmac("0123456789abcdef0123456789abcdef");
  const std::string_view view(reinterpret_cast<const char*>(buf.data()), chunk);
  const double sha = gbps(total, chunk, [&] { sink += hmac.tag({view})[0]; });
  std::printf("gmac (%s GHASH, AES-NI=%s)  %.2f GB/s\n", k.hardware() ? "PCLMULQDQ" : "portable",
              gmac_detail::have_x86_gcm() ? "yes" : "no", gmac);
  std::printf("ghash portable              %.3f GB/s\n", portable);
  std::printf("hmac-sha256 (%s)        %.2f GB/s\n",
              sha256_detail::have_x86_sha() ? "SHA-NI" : "portable", sha);
  return sink == 0xffffffffu ? 1 : 0;
}
