// The read buffer of a rendezvous connection.
#include "rendezvous/read_buffer.h"

#include <algorithm>
#include <cstring>

#include "rendezvous/protocol.h"

namespace hvdrun::rendezvous {

namespace {

// Read buffer sizes: a connection that has not authenticated gets room for the one frame
// it may send (4 + 64 bytes); after that reads go in chunks, and the buffer doubles only
// when data that arrived fills it. The first chunk fits a rank's requests (tens to a few
// hundred bytes): at 16,384 connections 16 KiB each held 256 MiB of buffers that were
// almost all empty (bench/rendezvous_load.cc), 1 KiB holds 16 MiB.
constexpr std::size_t kHandshakeBuffer = 128;
constexpr std::size_t kReadChunk = 1024;
constexpr std::size_t kIdleBufferCap = 65536;

}  // namespace

ReadBuffer::ReadBuffer(std::size_t& accounted) : accounted_(accounted), buf_(kHandshakeBuffer) {
  accounted_ += buf_.size();
}

void ReadBuffer::release() { accounted_ -= buf_.size(); }

void ReadBuffer::resize(std::size_t n) {
  accounted_ = accounted_ - buf_.size() + n;
  if (n < buf_.size()) {
    std::vector<char>(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(n)).swap(buf_);
  } else {
    buf_.resize(n);
  }
}

std::pair<char*, std::size_t> ReadBuffer::room(bool authenticated) {
  const std::size_t min_free = authenticated ? 256 : 1;
  if (start_ == end_) {
    start_ = end_ = 0;
    if (buf_.size() > kIdleBufferCap) resize(kReadChunk);  // a large frame is done
  }
  if (buf_.size() - end_ < min_free && start_ != 0) {
    std::memmove(buf_.data(), buf_.data() + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
  if (buf_.size() - end_ < min_free) {
    std::size_t next = std::max(buf_.size() * 2, authenticated ? kReadChunk : kHandshakeBuffer);
    if (end_ >= 4) {
      const std::size_t frame = 4 + std::size_t{get_u32(buf_.data())};
      next = std::min(next, std::max(frame, buf_.size() + min_free));
    }
    resize(next);
  }
  return {buf_.data() + end_, buf_.size() - end_};
}

}  // namespace hvdrun::rendezvous
