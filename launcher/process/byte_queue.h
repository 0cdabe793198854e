// A contiguous FIFO of bytes with cheap append-in-place: the agent reads rank output
// straight into it behind a frame header, and the launcher reads agent frames into it,
// so bulk output is copied as few times as possible.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

namespace hvdrun::launcher {

/// Growable byte FIFO. Bytes live in one contiguous block: [data(), data()+size()).
class ByteQueue {
 public:
  ByteQueue() = default;
  /// Moves leave `other` empty.
  ByteQueue(ByteQueue&& other) noexcept
      : buf_(std::move(other.buf_)),
        cap_(std::exchange(other.cap_, 0)),
        head_(std::exchange(other.head_, 0)),
        tail_(std::exchange(other.tail_, 0)) {}
  ByteQueue& operator=(ByteQueue&& other) noexcept {
    if (this != &other) {
      buf_ = std::move(other.buf_);
      cap_ = std::exchange(other.cap_, 0);
      head_ = std::exchange(other.head_, 0);
      tail_ = std::exchange(other.tail_, 0);
    }
    return *this;
  }

  /// First unread byte.
  char* data() noexcept { return buf_.get() + head_; }
  /// First unread byte.
  const char* data() const noexcept { return buf_.get() + head_; }
  /// Number of unread bytes.
  std::size_t size() const noexcept { return tail_ - head_; }
  /// True when nothing is queued.
  bool empty() const noexcept { return tail_ == head_; }
  /// The unread bytes as a view (valid until the next mutating call).
  std::string_view view() const noexcept { return {data(), size()}; }

  /// Returns room for at least `n` more bytes at the end; follow with commit().
  char* prepare(std::size_t n) {
    if (cap_ - tail_ < n) make_room(n);
    return buf_.get() + tail_;
  }
  /// Marks `n` bytes written through prepare() as queued.
  void commit(std::size_t n) noexcept { tail_ += n; }
  /// Appends a copy of `n` bytes.
  void append(const void* p, std::size_t n) {
    if (n == 0) return;
    std::memcpy(prepare(n), p, n);
    commit(n);
  }
  /// Appends a copy of `s`.
  void append(std::string_view s) { append(s.data(), s.size()); }
  /// Drops `n` bytes from the front.
  void consume(std::size_t n) noexcept {
    head_ += n;
    if (head_ == tail_) head_ = tail_ = 0;
  }
  /// Drops everything.
  void clear() noexcept { head_ = tail_ = 0; }

 private:
  void make_room(std::size_t n) {
    std::size_t used = size();
    if (head_ > 0 && cap_ - used >= n && used <= cap_ / 2) {
      std::memmove(buf_.get(), data(), used);  // compact in place
    } else {
      std::size_t cap = cap_ ? cap_ : 4096;
      while (cap - used < n) cap *= 2;
      std::unique_ptr<char[]> fresh(new char[cap]);
      if (used) std::memcpy(fresh.get(), data(), used);
      buf_ = std::move(fresh);
      cap_ = cap;
    }
    head_ = 0;
    tail_ = used;
  }

  std::unique_ptr<char[]> buf_;
  std::size_t cap_ = 0;
  std::size_t head_ = 0;
  std::size_t tail_ = 0;
};

}  // namespace hvdrun::launcher
