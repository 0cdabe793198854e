// LogLimiter: one warning line per cause per interval (see log_limiter.h).
#include "common/log_limiter.h"

#include <spdlog/spdlog.h>

#include "common/log.h"

namespace hvdrun {
namespace {

constexpr std::size_t kMaxCauses = 64;
constexpr std::string_view kOtherCause = "(other causes)";

std::string seconds(std::chrono::milliseconds d) {
  const auto s = d.count() / 1000;
  return s > 0 ? std::to_string(s) + " s" : std::to_string(d.count()) + " ms";
}

}  // namespace

LogLimiter::LogLimiter(std::chrono::milliseconds interval, spdlog::logger* logger)
    : interval_(interval), logger_(logger) {}

spdlog::logger& LogLimiter::out() const { return logger_ != nullptr ? *logger_ : hvdrun::log(); }

bool LogLimiter::admit(std::string_view cause, std::uint64_t& held_back, Clock::time_point now) {
  std::lock_guard lock(mu_);
  ++total_;
  auto it = causes_.find(std::string(cause));
  if (it == causes_.end()) {
    // A bounded table: causes come from a fixed set (errno texts, named rejections), but
    // a bug elsewhere must not turn this into a leak.
    const std::string key(causes_.size() < kMaxCauses ? cause : kOtherCause);
    it = causes_.try_emplace(key).first;
  }
  Entry& e = it->second;
  if (e.written && now - e.last < interval_) {
    ++e.held;
    return false;
  }
  held_back = e.held;
  e.held = 0;
  e.last = now;
  e.written = true;
  return true;
}

void LogLimiter::warn(std::string_view cause, const std::string& message) {
  std::uint64_t held = 0;
  if (!admit(cause, held, Clock::now())) return;
  if (held == 0) {
    out().warn("{}", message);
  } else {
    out().warn("{} (and {} more like it in the last {})", message, held,
               seconds(std::chrono::duration_cast<std::chrono::milliseconds>(interval_)));
  }
}

void LogLimiter::flush(std::string_view what) {
  std::lock_guard lock(mu_);
  for (auto& [cause, e] : causes_) {
    if (e.held == 0) continue;
    out().warn("{}: {} more of '{}' since the last report", what, e.held, cause);
    e.held = 0;
  }
}

std::uint64_t LogLimiter::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace hvdrun
