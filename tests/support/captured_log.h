// What spdlog's default logger writes while a CapturedLog lives, and what reaches file
// descriptor 2 while a CapturedStderr lives: for tests that count the warning lines a
// server writes (rate limits, refusals) and check where they go.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "common/log.h"

namespace hvdrun::testing {

/// A sink that keeps what it is given, readable from another thread than the writer's.
class StringSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  /// Everything written so far.
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    text_.append(buf.data(), buf.size());
  }
  void flush_() override {}

 private:
  std::string text_;
};

/// Replaces the default logger while it lives; the previous one comes back after. Named
/// "hvdrun" (the default), it stands for the launcher's logger, which hvdrun's libraries
/// write to (common/log.h); under another name, for a training program's own logger,
/// which they must leave alone.
class CapturedLog {
 public:
  explicit CapturedLog(const std::string& name = kLoggerName)
      : sink_(std::make_shared<StringSink>()), previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(name, sink_));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  /// Everything logged so far.
  std::string text() const { return sink_->text(); }
  /// Lines logged so far that contain `what`.
  int lines_with(const std::string& what) const {
    std::istringstream in(text());
    int n = 0;
    for (std::string l; std::getline(in, l);) n += l.find(what) != std::string::npos ? 1 : 0;
    return n;
  }

 private:
  std::shared_ptr<StringSink> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

/// Sends this process's file descriptor 2 (stderr, where hvdrun's own log writes inside a
/// training program) to a temporary file while it lives; the previous stderr comes back
/// after.
class CapturedStderr {
 public:
  CapturedStderr() : file_(std::tmpfile()), saved_(::dup(2)) {
    std::fflush(stderr);
    if (file_ != nullptr) ::dup2(::fileno(file_), 2);
  }
  ~CapturedStderr() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
    }
    if (file_ != nullptr) std::fclose(file_);
  }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;
  /// Everything written to stderr so far.
  std::string text() const {
    std::fflush(stderr);
    std::string out;
    if (file_ == nullptr) return out;
    char buf[4096];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(::fileno(file_), buf, sizeof buf, at);
      if (n <= 0) return out;
      out.append(buf, static_cast<std::size_t>(n));
      at += n;
    }
  }

 private:
  std::FILE* file_;
  int saved_;
};

}  // namespace hvdrun::testing
