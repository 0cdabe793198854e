// GMAC (NIST SP 800-38D: GCM with no plaintext, the message as additional authenticated
// data) over AES-128, of our own for the same reason as sha256.h: libhvdrun imports no
// crypto library. It authenticates the frames host leaders exchange (runtime/frames/frame_comm.h):
// HMAC-SHA256 cannot keep up with the wire, GHASH on carry-less multiply can. AES and
// GHASH each have a portable path and a hardware one (AES-NI, PCLMULQDQ), picked at run
// time; tests check each against the other and against the GCM specification's vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace hvdrun::rendezvous {

/// Bytes of a GMAC key (AES-128) and of a tag.
inline constexpr std::size_t kGmacKeyBytes = 16;
inline constexpr std::size_t kGmacTagBytes = 16;
/// Bytes of the GCM initialisation vector (the 96-bit form).
inline constexpr std::size_t kGmacIvBytes = 12;

/// AES-128 block encryption (FIPS 197), the cipher under GMAC.
class Aes128 {
 public:
  /// Expands `key` (16 bytes).
  explicit Aes128(const unsigned char* key);
  /// Encrypts one 16-byte block from `in` to `out` (they may be equal).
  void encrypt(const unsigned char* in, unsigned char* out) const;

 private:
  alignas(16) std::array<unsigned char, 176> round_keys_{};
  bool hardware_ = false;
};

/// A GMAC key: AES-128 for the tag mask, and the GHASH key H = AES(0) with its powers.
class GmacKey {
 public:
  /// Sets up the key from `key` (kGmacKeyBytes bytes).
  explicit GmacKey(const unsigned char* key);
  /// The tag of `n` bytes at `data` (as GCM's additional data) under `iv` (12 bytes).
  std::array<unsigned char, kGmacTagBytes> tag(const unsigned char* iv, const unsigned char* data,
                                               std::size_t n) const;
  /// True when GHASH runs on PCLMULQDQ here.
  bool hardware() const { return hardware_; }

 private:
  friend class GmacStream;
  Aes128 aes_;
  // H^1..H^4 in the form the hardware path multiplies (byte-reversed), and H as bytes.
  alignas(16) std::array<unsigned char, 64> powers_{};
  std::array<unsigned char, 16> h_{};
  bool hardware_ = false;
};

/// An incremental GMAC: the message fed in pieces of any size (so a frame is hashed as
/// its bytes reach or leave the socket), then finished under one IV.
class GmacStream {
 public:
  /// Starts a message under `key`, which must outlive the stream.
  explicit GmacStream(const GmacKey& key) : key_(key) {}
  /// Appends `n` bytes at `data`.
  void update(const unsigned char* data, std::size_t n);
  /// The tag of everything appended since construction or reset(), under `iv` (12 bytes).
  std::array<unsigned char, kGmacTagBytes> finish(const unsigned char* iv);
  /// Starts a new message under the same key.
  void reset();

 private:
  void blocks(const unsigned char* data, std::size_t n);  // n a multiple of 16

  const GmacKey& key_;
  alignas(16) std::array<unsigned char, 16> state_{};
  std::array<unsigned char, 16> partial_{};
  std::size_t used_ = 0;
  std::uint64_t length_ = 0;
};

/// The pieces behind GmacKey, exposed so tests can check the paths against each other.
namespace gmac_detail {
/// True when this CPU has AES-NI, PCLMULQDQ and SSSE3/SSE4.1 (the hardware paths).
bool have_x86_gcm();
/// GHASH of `n` bytes (a multiple of 16) into `state` with key `h`, portable.
void ghash_portable(unsigned char* state, const unsigned char* h, const unsigned char* data,
                    std::size_t n);
/// AES-128 encryption of one block, portable (`round_keys`: 176 bytes, expanded portably).
void aes_portable_expand(const unsigned char* key, unsigned char* round_keys);
void aes_portable_encrypt(const unsigned char* round_keys, const unsigned char* in,
                          unsigned char* out);
}  // namespace gmac_detail

/// Compares two tags in time independent of where they differ.
bool gmac_tags_equal(const unsigned char* a, const unsigned char* b);

}  // namespace hvdrun::rendezvous
