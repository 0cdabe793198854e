// The byte layout hvdrun's three wire protocols share (the rendezvous protocol, the agent
// protocol and the control channel between an agent and its ranks): unsigned integers
// big-endian, signed ones as their two's complement, a string as its u32 length and its
// bytes. One writer and one reader for all three; each protocol keeps its frames, its
// limits and its own error type, which the reader raises through the protocol's `Fail`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace hvdrun::wire {

/// Writes `v` big-endian into the 4 bytes at `p`.
inline void put_u32(char* p, std::uint32_t v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}

/// Reads the big-endian u32 at `p` (4 bytes).
inline std::uint32_t get_u32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         std::uint32_t{b[3]};
}

/// Builds a payload field by field.
class Writer {
 public:
  void u8(std::uint8_t v) { s_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) {
    u8(static_cast<std::uint8_t>(v >> 8));
    u8(static_cast<std::uint8_t>(v));
  }
  void u32(std::uint32_t v) {
    char b[4];
    put_u32(b, v);
    s_.append(b, 4);
  }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void u64(std::uint64_t v) {
    u32(static_cast<std::uint32_t>(v >> 32));
    u32(static_cast<std::uint32_t>(v));
  }
  /// The length, then the bytes.
  void str(std::string_view v) {
    u32(static_cast<std::uint32_t>(v.size()));
    s_.append(v);
  }
  const std::string& bytes() const { return s_; }
  std::size_t size() const { return s_.size(); }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

/// What a reader found wrong with a payload.
enum class Problem {
  truncated,  ///< a field needs more bytes than are left (`n`: the bytes it needs)
  trailing,   ///< bytes are left after the last field (`n`: how many)
};

/// Reads a payload field by field; every read checks the length left, and a payload that
/// is short or too long ends in `fail(problem, n)`, which must throw (the protocol's own
/// error, in its own words).
template <typename Fail>
class Reader {
 public:
  Reader(std::string_view p, Fail fail) : p_(p), fail_(std::move(fail)) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint16_t u16() {
    const std::uint16_t hi = u8();
    return static_cast<std::uint16_t>((hi << 8) | u8());
  }
  std::uint32_t u32() { return get_u32(take(4)); }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::uint64_t u64() {
    const std::uint64_t hi = u32();
    return (hi << 32) | u32();
  }
  /// The next `n` bytes.
  std::string_view view(std::size_t n) { return {take(n), n}; }
  /// A string's u32 length; the bytes are view(length) (after checking the length against
  /// the protocol's own limit).
  std::uint32_t length() { return u32(); }
  std::string str() { return std::string(view(length())); }
  /// Bytes not read yet.
  std::size_t left() const { return p_.size(); }
  /// Ends the payload: nothing may be left.
  void done() const {
    if (!p_.empty()) fail_(Problem::trailing, p_.size());
  }

 private:
  const char* take(std::size_t n) {
    if (n > p_.size()) fail_(Problem::truncated, n);
    const char* d = p_.data();
    p_.remove_prefix(n);
    return d;
  }
  std::string_view p_;
  Fail fail_;
};

}  // namespace hvdrun::wire
