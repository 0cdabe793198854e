// LineTail: scans only the end of large chunks.
#include "launcher/process/line_tail.h"

#include <cstring>

namespace hvdrun::launcher {

void LineTail::append_partial(std::string_view s) {
  std::size_t room = max_line_bytes_ > partial_.size() ? max_line_bytes_ - partial_.size() : 0;
  if (s.size() > room) {
    partial_.append(s.substr(0, room));
    partial_cut_ = true;
  } else {
    partial_.append(s);
  }
}

void LineTail::add(std::string_view chunk) {
  if (max_lines_ == 0 || chunk.empty()) return;
  // Find where the last max_lines complete lines (plus the trailing partial) begin; if the
  // chunk has more newlines than that, everything kept so far is superseded.
  std::size_t newlines = 0;
  std::size_t end = chunk.size();
  std::size_t start = 0;
  while (end > 0) {
    const void* p = memrchr(chunk.data(), '\n', end);
    if (!p) break;
    std::size_t pos = static_cast<std::size_t>(static_cast<const char*>(p) - chunk.data());
    if (++newlines > max_lines_) {
      start = pos + 1;
      lines_.clear();
      partial_.clear();
      partial_cut_ = false;
      break;
    }
    end = pos;
  }
  std::string_view rest = chunk.substr(start);
  while (!rest.empty()) {
    std::size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) {
      append_partial(rest);
      break;
    }
    append_partial(rest.substr(0, nl));
    if (partial_cut_) partial_ += "...";
    lines_.push_back(std::move(partial_));
    partial_.clear();
    partial_cut_ = false;
    if (lines_.size() > max_lines_) lines_.pop_front();
    rest.remove_prefix(nl + 1);
  }
}

std::vector<std::string> LineTail::lines() const {
  std::vector<std::string> out(lines_.begin(), lines_.end());
  if (!partial_.empty()) {
    out.push_back(partial_cut_ ? partial_ + "..." : partial_);
    if (out.size() > max_lines_) out.erase(out.begin());
  }
  return out;
}

}  // namespace hvdrun::launcher
