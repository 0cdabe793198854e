// What spdlog's default logger writes while a CapturedLog lives: for tests that count the
// warning lines a server writes (rate limits, refusals).
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>

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

/// Replaces the default logger while it lives; the previous one comes back after.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<StringSink>()), previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink_));
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

}  // namespace hvdrun::testing
