// RAII ownership of POSIX file descriptors, and the few fd helpers every module needs.
#pragma once

#include <utility>

namespace hvdrun {

/// Owns one file descriptor and closes it on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  /// Takes ownership of `fd` (may be -1 for "none").
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  /// The descriptor, or -1.
  int get() const noexcept { return fd_; }
  /// True when a descriptor is held.
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives up ownership without closing.
  int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes the held descriptor (if any) and takes `fd`.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

/// A pipe with both ends close-on-exec: {read end, write end}. Throws SystemError.
std::pair<UniqueFd, UniqueFd> make_pipe();

/// Sets or clears O_NONBLOCK. Throws SystemError.
void set_nonblocking(int fd, bool on = true);

/// Writes all of `data`, retrying on EINTR and short writes (blocking fd). Returns false
/// when the peer is gone (EPIPE) or another error occurred; errno is left set.
bool write_all(int fd, const void* data, std::size_t size) noexcept;

}  // namespace hvdrun
