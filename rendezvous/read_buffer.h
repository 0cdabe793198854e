// The read buffer of one rendezvous connection: frames are parsed where they arrived, and
// the buffer grows only with bytes that arrive, never with what a length prefix announces,
// so a connection that claims a large frame and sends nothing holds almost no memory.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace hvdrun::rendezvous {

class ReadBuffer {
 public:
  /// An empty buffer sized for a handshake, its bytes counted in `accounted` (the
  /// server's total over all connections) until release().
  explicit ReadBuffer(std::size_t& accounted);

  /// Bytes received and not yet consumed.
  std::size_t available() const { return end_ - start_; }
  /// The first of them.
  const char* data() const { return buf_.data() + start_; }
  /// Marks `n` bytes as parsed (what data() pointed to stays valid until room()).
  void consume(std::size_t n) { start_ += n; }
  /// Room for the next read, at least 1 byte before authentication and 256 after: the
  /// unparsed bytes move to the front, and the buffer doubles only when bytes that arrived
  /// fill it, never beyond the frame in progress.
  std::pair<char*, std::size_t> room(bool authenticated);
  /// `n` bytes were read into room().
  void received(std::size_t n) { end_ += n; }
  /// Takes the buffer's bytes out of the count, once, when the connection closes (a read
  /// in flight may still hold the memory, so it stays until destruction).
  void release();

 private:
  void resize(std::size_t n);

  std::size_t& accounted_;
  std::vector<char> buf_;
  std::size_t start_ = 0;  // first unparsed byte
  std::size_t end_ = 0;    // end of received data
};

}  // namespace hvdrun::rendezvous
