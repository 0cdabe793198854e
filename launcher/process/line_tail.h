// The last few lines of a stream, kept cheaply whatever the volume: failure messages quote
// the last lines a rank wrote to stderr, and a rank may write gigabytes before it fails.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::launcher {

/// Ring of the last `max_lines` lines of a byte stream (each cut to `max_line_bytes`).
class LineTail {
 public:
  /// Keeps at most `max_lines` lines of at most `max_line_bytes` bytes each.
  explicit LineTail(std::size_t max_lines = 10, std::size_t max_line_bytes = 1024)
      : max_lines_(max_lines), max_line_bytes_(max_line_bytes) {}

  /// Adds the next bytes of the stream. Cost is proportional to the tail, not the chunk,
  /// once the chunk holds more than `max_lines` lines.
  void add(std::string_view chunk);

  /// The kept lines, oldest first, without newlines; an unterminated last line included.
  std::vector<std::string> lines() const;

 private:
  void append_partial(std::string_view s);

  std::size_t max_lines_;
  std::size_t max_line_bytes_;
  std::deque<std::string> lines_;
  std::string partial_;
  bool partial_cut_ = false;
};

}  // namespace hvdrun::launcher
