// StartWindow and the HVDRUN_LAUNCH_CONCURRENCY knob (start_window.h).
#include "launcher/plan/start_window.h"

#include <charconv>
#include <cstring>
#include <string>

#include "common/error.h"

namespace hvdrun::launcher {

std::size_t launch_concurrency(const char* value) {
  if (value == nullptr || *value == '\0') return kDefaultLaunchConcurrency;
  std::size_t n = 0;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, n);
  if (ec != std::errc() || p != end || n < 1 || n > 65536) {
    throw UsageError("HVDRUN_LAUNCH_CONCURRENCY='" + std::string(value) +
                     "' is not a whole number from 1 to 65536; it bounds the hosts started at "
                     "once (default " +
                     std::to_string(kDefaultLaunchConcurrency) + ")");
  }
  return n;
}

StartWindow::StartWindow(std::size_t total, std::size_t limit)
    : total_(total), limit_(limit == 0 ? 1 : limit) {}

std::optional<std::size_t> StartWindow::next() {
  if (stopped_ || next_ == total_ || in_flight_ >= limit_) return std::nullopt;
  ++in_flight_;
  return next_++;
}

void StartWindow::finished() {
  if (in_flight_ > 0) --in_flight_;
}

}  // namespace hvdrun::launcher
