// A fast rank program for the output fault tests (shell loops are too slow to make the
// load they need):
//   output_writer long-line BYTES     one line of BYTES pattern bytes (kPattern repeated),
//                                     then "after\n"
//   output_writer lines RATE SECONDS  RATE lines per second for SECONDS, paced by a
//                                     clock, each "r<rank> <seq> <padding> end\n"; the
//                                     writes cut lines in two on purpose
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

constexpr char kPattern[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

bool write_all(const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(1, p, n);
    if (w < 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

int long_line(unsigned long long bytes) {
  // A block whose length is a multiple of the pattern, so every block starts in phase.
  std::string block;
  while (block.size() < (1u << 20)) block += kPattern;
  unsigned long long left = bytes;
  while (left > 0) {
    std::size_t n = left < block.size() ? static_cast<std::size_t>(left) : block.size();
    if (!write_all(block.data(), n)) return 1;
    left -= n;
  }
  return write_all("\nafter\n", 7) ? 0 : 1;
}

int lines(long rate, double seconds) {
  const char* rank_env = std::getenv("HVDRUN_RANK");
  const std::string rank = rank_env ? rank_env : "0";
  const long total = static_cast<long>(static_cast<double>(rate) * seconds);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr auto kTick = std::chrono::milliseconds(10);
  std::string batch;
  long seq = 0;
  for (long tick = 1; seq < total; ++tick) {
    // Lines due by the end of this tick, from the start: no drift.
    long due = std::min(total, rate * tick / 100);
    batch.clear();
    for (; seq < due; ++seq) {
      batch += "r" + rank + " " + std::to_string(seq) + " ";
      batch.append(40, static_cast<char>('a' + seq % 26));
      batch += " end\n";
    }
    std::size_t half = batch.size() / 2;  // mid-line, most likely
    if (!write_all(batch.data(), half) || !write_all(batch.data() + half, batch.size() - half))
      return 1;
    std::this_thread::sleep_until(t0 + tick * kTick);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "long-line") == 0)
    return long_line(std::strtoull(argv[2], nullptr, 10));
  if (argc == 4 && std::strcmp(argv[1], "lines") == 0)
    return lines(std::strtol(argv[2], nullptr, 10), std::strtod(argv[3], nullptr));
  std::fprintf(stderr, "usage: output_writer long-line BYTES | lines RATE SECONDS\n");
  return 2;
}
