// SHA-256 (FIPS 180-4) of our own, for the rendezvous HMAC. libhvdrun lives inside other
// people's processes: a framework loaded before it (TensorFlow bundles BoringSSL) can
// export OpenSSL's names, and the dynamic linker would then bind libhvdrun's calls to that
// copy. Code compiled into the library with hidden visibility cannot be taken over that
// way, so the runtime carries its digest itself instead of importing libcrypto.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hvdrun::rendezvous {

/// Bytes of a SHA-256 digest.
inline constexpr std::size_t kSha256Bytes = 32;
/// Bytes of a SHA-256 block (HMAC pads its key to this).
inline constexpr std::size_t kSha256BlockBytes = 64;

/// Incremental SHA-256. A plain value: copying it forks the hash state (HMAC keeps its
/// keyed inner and outer states and continues copies of them for every tag).
class Sha256 {
 public:
  /// The initial state (nothing hashed yet).
  Sha256() = default;
  /// Appends `data` to the message.
  void update(std::string_view data);
  /// Appends `n` bytes at `data`.
  void update(const unsigned char* data, std::size_t n);
  /// Pads the message and returns its digest; the object is spent afterwards.
  std::array<unsigned char, kSha256Bytes> finish();
  /// The digest of `data` in one call.
  static std::array<unsigned char, kSha256Bytes> digest(std::string_view data);

 private:
  void compress(const unsigned char* blocks, std::size_t n);

  std::array<std::uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, kSha256BlockBytes> buf_{};
  std::size_t used_ = 0;      // bytes waiting in buf_
  std::uint64_t length_ = 0;  // message bytes so far
};

/// The block functions behind Sha256, exposed so tests can check each against the other.
namespace sha256_detail {
/// Runs `n` 64-byte blocks through the compression function in portable C++.
void compress_portable(std::uint32_t* state, const unsigned char* blocks, std::size_t n);
/// True when this CPU has the x86 SHA extensions (Sha256 then uses them).
bool have_x86_sha();
#if defined(__x86_64__)
/// As compress_portable, on the x86 SHA extensions (only where have_x86_sha()).
void compress_x86_sha(std::uint32_t* state, const unsigned char* blocks, std::size_t n);
#endif
}  // namespace sha256_detail

}  // namespace hvdrun::rendezvous
