// Command-line numbers for the benchmark programs: strictly decimal, or the program stops
// with a message naming the argument (atoi would read "8x" as 8 and "x" as 0).
#pragma once

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hvdrun::bench {

/// argv[i] as an int when given, else `fallback`; exits 2 on anything but a decimal.
inline int int_arg(int argc, char** argv, int i, int fallback) {
  if (i >= argc) return fallback;
  int value = 0;
  const char* end = argv[i] + std::strlen(argv[i]);
  auto [p, ec] = std::from_chars(argv[i], end, value);
  if (ec != std::errc() || p != end) {
    std::fprintf(stderr, "%s: argument %d '%s' is not a whole number\n", argv[0], i, argv[i]);
    std::exit(2);
  }
  return value;
}

}  // namespace hvdrun::bench
