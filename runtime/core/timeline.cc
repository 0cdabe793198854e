// The timeline writer (runtime/core/timeline.h): callers queue events under one mutex; one
// thread per started timeline formats each batch and appends it with pwrite, followed by
// the closing bracket, which the next batch overwrites.
#include "runtime/core/timeline.h"

#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/log.h"
#include "common/safe_path.h"

namespace hvdrun::runtime {
namespace {

constexpr std::string_view kClose = "\n]\n";

std::int64_t epoch_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The length of the UTF-8 sequence starting at text[i], 0 when it is not one.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  std::size_t n = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return 0;
  }
  return n;
}

void append_escaped_byte(std::string& out, unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u00";
  out += kHex[c >> 4];
  out += kHex[c & 0xF];
}

void quoted(std::string& out, std::string_view text) {
  out += '"';
  out += json_escape(text);
  out += '"';
}

// One event as JSON, preceded by the separator from the previous one.
void format(std::string& out, char ph, int pid, std::int64_t ts, std::string_view name) {
  out += ",\n{\"ph\": \"";
  out += ph;
  out += '"';
  if (ph != 'E') {
    out += ", \"name\": ";
    quoted(out, name);
  }
  out += ", \"ts\": " + std::to_string(ts) + ", \"pid\": " + std::to_string(pid) + ", \"tid\": 0";
}

void format_row(std::string& out, int pid, std::string_view name) {
  const std::string id = std::to_string(pid);
  out +=
      ",\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + id + ", \"args\": {\"name\": ";
  quoted(out, name);
  out += "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + id +
         ", \"args\": {\"sort_index\": " + id + "}}";
}

// `path`'s directory and the file in it, by common/safe_path.h's rules.
UniqueFd open_file(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..")
    throw UnsafePath(path, "names a directory, not a file");
  UniqueFd top = open_trusted_dir(dir, false);
  return open_private_file(top.get(), path, name, true);
}

}  // namespace

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      append_escaped_byte(out, c);
    } else if (c >= 0x80) {
      const std::size_t n = utf8_length(text, i);
      if (n == 0) {
        append_escaped_byte(out, c);
      } else {
        out.append(text.substr(i, n));
        i += n;
        continue;
      }
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard control(control_);
  stop_writer();
  UniqueFd fd = open_file(path);
  const auto started = std::chrono::steady_clock::now();
  // Row 0 carries the wall-clock time of ts 0, to line up the files of several ranks.
  std::string header =
      "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": "
      "\"hvdrun\", \"start_time_since_epoch_in_micros\": " +
      std::to_string(epoch_micros()) +
      "}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": "
      "{\"sort_index\": 0}}";
  fd_ = std::move(fd);
  file_ = path;
  end_ = 0;
  try {
    append(header);
  } catch (...) {
    fd_.reset();
    throw;
  }
  std::lock_guard lock(mu_);
  path_ = path;
  start_ = started;
  rows_.clear();
  next_pid_ = 1;
  dropped_ = dropped_reported_ = 0;
  error_.clear();
  writing_ = true;
  stopping_ = false;
  mark_cycles_.store(mark_cycles, std::memory_order_relaxed);
  enabled_.store(true, std::memory_order_relaxed);
  thread_ = std::thread(&Timeline::writer, this);
}

void Timeline::stop() {
  std::lock_guard control(control_);
  stop_writer();
}

void Timeline::stop_writer() {
  {
    std::lock_guard lock(mu_);
    enabled_.store(false, std::memory_order_relaxed);
    writing_ = false;
    stopping_ = true;
  }
  work_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  stopping_ = false;
  rows_.clear();
  path_.clear();
  fd_.reset();
}

void Timeline::flush() {
  std::unique_lock lock(mu_);
  const std::uint64_t target = queued_;
  written_cv_.wait(lock, [&] { return written_ >= target; });
}

std::string Timeline::path() const {
  std::lock_guard lock(mu_);
  return path_;
}

std::uint64_t Timeline::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

std::string Timeline::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::int64_t Timeline::now() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start_)
      .count();
}

void Timeline::record(What what, std::string_view name, std::string_view text,
                      std::string_view dtype, std::string_view shape) {
  std::lock_guard lock(mu_);
  if (!writing_) return;
  const std::int64_t ts = now();
  if (what == What::kMarker) {
    push(Event{'i', 0, ts, std::string(text), {}, {}});
    return;
  }
  if (what == What::kBegin || what == What::kNegotiate) {
    Row& r = row(name, ts);
    ++r.open;
    push(Event{'B',
               r.pid,
               ts,
               what == What::kNegotiate ? "NEGOTIATE_" + std::string(text) : std::string(text),
               {},
               {}});
    return;
  }
  // kEnd closes the innermost phase, kEndAll every open one.
  auto it = rows_.find(name);
  if (it == rows_.end()) return;
  Row& r = it->second;
  while (r.open > 0) {
    --r.open;
    const bool last = what == What::kEnd || r.open == 0;
    push(Event{'E', r.pid, ts, {}, last ? std::string(dtype) : "", last ? std::string(shape) : ""});
    if (what == What::kEnd) break;
  }
}

void Timeline::record_rank(std::string_view name, int rank) {
  std::lock_guard lock(mu_);
  if (!writing_) return;
  const std::int64_t ts = now();
  push(Event{'X', row(name, ts).pid, ts, std::to_string(rank), {}, {}});
}

Timeline::Row& Timeline::row(std::string_view name, std::int64_t ts) {
  auto it = rows_.find(name);
  if (it != rows_.end()) return it->second;
  if (rows_.size() >= max_rows_) {
    std::erase_if(rows_, [](const auto& entry) { return entry.second.open == 0; });
  }
  const int pid = next_pid_++;
  push(Event{'M', pid, ts, std::string(name), {}, {}});
  return rows_.emplace(std::string(name), Row{pid, 0}).first->second;
}

void Timeline::push(Event event) {
  if (queue_.size() >= max_queued_) {
    ++dropped_;
    return;
  }
  queue_.push_back(std::move(event));
  ++queued_;
  if (queue_.size() == 1) work_cv_.notify_one();
}

void Timeline::writer() {
  std::vector<Event> batch;
  std::string text;
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything is written
    batch.swap(queue_);
    const std::uint64_t upto = queued_;
    const std::uint64_t lost = dropped_ - dropped_reported_;
    dropped_reported_ = dropped_;
    const std::int64_t ts = now();
    lock.unlock();

    text.clear();
    for (const Event& e : batch) {
      if (e.ph == 'M') {
        format_row(text, e.pid, e.text);
        continue;
      }
      format(text, e.ph, e.pid, e.ts, e.text);
      if (e.ph == 'X') text += ", \"dur\": 0";
      if (e.ph == 'i') text += ", \"s\": \"g\"";
      if (!e.dtype.empty() || !e.shape.empty()) {
        text += ", \"args\": {\"dtype\": ";
        quoted(text, e.dtype);
        text += ", \"shape\": ";
        quoted(text, e.shape);
        text += '}';
      }
      text += '}';
    }
    if (lost > 0) {
      format(text, 'i', 0, ts, "TIMELINE_EVENTS_DROPPED");
      text += ", \"s\": \"g\", \"args\": {\"dropped\": " + std::to_string(lost) + "}}";
    }
    batch.clear();
    std::string failure;
    try {
      append(text);
    } catch (const std::exception& e) {
      failure = e.what();
    }

    lock.lock();
    written_ = upto;
    if (!failure.empty()) {
      // The disk is full or gone: stop recording rather than fail collectives.
      error_ = failure;
      hvdrun::log().warn("hvdrun: {}; the timeline stops here", failure);
      writing_ = false;
      enabled_.store(false, std::memory_order_relaxed);
      queue_.clear();
      written_ = queued_;
    }
    written_cv_.notify_all();
  }
}

void Timeline::append(const std::string& text) {
  std::string chunk = text;
  chunk += kClose;
  std::size_t done = 0;
  while (done < chunk.size()) {
    const ssize_t n = ::pwrite(fd_.get(), chunk.data() + done, chunk.size() - done,
                               static_cast<off_t>(end_ + static_cast<std::int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Best effort: put the closing bracket back where the events end and cut off the
      // partial batch, so the file still parses (that space was written before).
      const int err = n < 0 ? errno : ENOSPC;
      (void)::pwrite(fd_.get(), kClose.data(), kClose.size(), static_cast<off_t>(end_));
      (void)::ftruncate(fd_.get(), static_cast<off_t>(end_ + std::ssize(kClose)));
      throw hvdrun::SystemError("timeline: writing " + file_, "pwrite", err);
    }
    done += static_cast<std::size_t>(n);
  }
  end_ += static_cast<std::int64_t>(text.size());
}

}  // namespace hvdrun::runtime
