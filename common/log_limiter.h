// Rate-limited warnings: a cause that repeats (a client with the wrong secret, accept
// failing while descriptors are short) is written once per interval, and the next line
// for it says how many were held back. A server under attack then logs a few lines a
// minute instead of one per attempt. Every warning an outsider can cause goes through one
// (the ports' through common/preauth_gate.h); python/hvdrun/_preauth.py is its mirror.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace spdlog {
class logger;
}

namespace hvdrun {

/// Writes warnings through spdlog, at most one line per cause per interval. Thread-safe.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  /// At most one line per cause every `interval`, written to `logger`, or when null to
  /// hvdrun's own log (common/log.h: the launcher's logger on stderr, never a training
  /// program's default logger, which may write to its stdout). `logger` must outlive this.
  explicit LogLimiter(std::chrono::milliseconds interval = std::chrono::seconds(10),
                      spdlog::logger* logger = nullptr);

  /// Decides for one occurrence of `cause` at `now`: true when a line may be written, and
  /// then `held_back` gets the number of occurrences not written since the last line.
  /// At most 64 distinct causes are told apart; further ones share one.
  bool admit(std::string_view cause, std::uint64_t& held_back, Clock::time_point now);

  /// Writes `message` as a warning unless `cause` had its line within the interval; a
  /// written line ends with "(and N more like it in the last S s)" when some were held.
  void warn(std::string_view cause, const std::string& message);

  /// Writes one line per cause with occurrences held back, and forgets them (at shutdown,
  /// so that no count is lost).
  void flush(std::string_view what);

  /// Occurrences of every cause so far, written or not (for tests and stats).
  std::uint64_t total() const;

 private:
  struct Entry {
    Clock::time_point last{};
    bool written = false;
    std::uint64_t held = 0;
  };

  spdlog::logger& out() const;

  const std::chrono::milliseconds interval_;
  spdlog::logger* logger_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> causes_;
  std::uint64_t total_ = 0;
};

}  // namespace hvdrun
