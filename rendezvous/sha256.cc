// SHA-256 as FIPS 180-4 section 6.2 states it (see sha256.h for why it is here).
#include "rendezvous/sha256.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace hvdrun::rendezvous {
namespace {

constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

std::uint32_t load_be(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

void store_be(unsigned char* p, std::uint32_t v) {
  p[0] = static_cast<unsigned char>(v >> 24);
  p[1] = static_cast<unsigned char>(v >> 16);
  p[2] = static_cast<unsigned char>(v >> 8);
  p[3] = static_cast<unsigned char>(v);
}

}  // namespace

namespace sha256_detail {

void compress_portable(std::uint32_t* state, const unsigned char* blocks, std::size_t n) {
  for (; n > 0; --n, blocks += kSha256BlockBytes) {
    std::array<std::uint32_t, 64> w{};
    for (std::size_t t = 0; t < 16; ++t) w[t] = load_be(blocks + 4 * t);
    for (std::size_t t = 16; t < 64; ++t) {
      const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (std::size_t t = 0; t < 64; ++t) {
      const std::uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
      const std::uint32_t t2 =
          (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

#if defined(__x86_64__)
// The same rounds on the x86 SHA extensions (four rounds per pair of sha256rnds2; the
// message schedule four words at a time with sha256msg1/msg2): about five times faster
// than the portable loop, which the launcher's rendezvous server notices at thousands of
// ranks. The instructions keep the state as ABEF and CDGH halves.
__attribute__((target("sha,sse4.1,ssse3"))) void compress_x86_sha(std::uint32_t* state,
                                                                  const unsigned char* blocks,
                                                                  std::size_t n) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  __m128i cdab = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state)), 0xB1);
  __m128i hgfe =
      _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4)), 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, hgfe, 8);
  __m128i cdgh = _mm_blend_epi16(hgfe, cdab, 0xF0);
  for (; n > 0; --n, blocks += kSha256BlockBytes) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4] = {};  // the last four groups of four schedule words
    for (std::size_t g = 0; g < 16; ++g) {
      __m128i& cur = w[g % 4];
      if (g < 4) {
        cur = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * g)),
                               bswap);
      } else {
        const __m128i prev = w[(g + 3) % 4], prev2 = w[(g + 2) % 4];
        __m128i t = _mm_sha256msg1_epu32(cur, w[(g + 1) % 4]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(prev, prev2, 4));
        cur = _mm_sha256msg2_epu32(t, prev);
      }
      const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kRound.data() + 4 * g));
      const __m128i msg = _mm_add_epi32(cur, k);
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, msg);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(msg, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

bool have_x86_sha() {
  static const bool have = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    const bool sse = (c & bit_SSE4_1) != 0 && (c & bit_SSSE3) != 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    return sse && (b & bit_SHA) != 0;
  }();
  return have;
}
#else
bool have_x86_sha() { return false; }
#endif

}  // namespace sha256_detail

void Sha256::compress(const unsigned char* blocks, std::size_t n) {
#if defined(__x86_64__)
  if (sha256_detail::have_x86_sha()) return sha256_detail::compress_x86_sha(h_.data(), blocks, n);
#endif
  sha256_detail::compress_portable(h_.data(), blocks, n);
}

void Sha256::update(const unsigned char* data, std::size_t n) {
  length_ += n;
  if (used_ > 0) {
    const std::size_t take = std::min(n, buf_.size() - used_);
    std::memcpy(buf_.data() + used_, data, take);
    used_ += take;
    data += take;
    n -= take;
    if (used_ < buf_.size()) return;
    compress(buf_.data(), 1);
    used_ = 0;
  }
  const std::size_t whole = n / kSha256BlockBytes;
  if (whole > 0) compress(data, whole);
  data += whole * kSha256BlockBytes;
  n -= whole * kSha256BlockBytes;
  if (n > 0) {
    std::memcpy(buf_.data(), data, n);
    used_ = n;
  }
}

void Sha256::update(std::string_view data) {
  update(reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

std::array<unsigned char, kSha256Bytes> Sha256::finish() {
  const std::uint64_t bits = length_ * 8;
  // 0x80, zeros up to 56 mod 64, then the message length in bits, big-endian.
  const unsigned char pad[kSha256BlockBytes] = {0x80};
  update(pad, used_ < 56 ? 56 - used_ : 120 - used_);
  unsigned char len[8];
  store_be(len, static_cast<std::uint32_t>(bits >> 32));
  store_be(len + 4, static_cast<std::uint32_t>(bits));
  update(len, sizeof len);
  std::array<unsigned char, kSha256Bytes> out{};
  for (std::size_t i = 0; i < h_.size(); ++i) store_be(out.data() + 4 * i, h_[i]);
  return out;
}

std::array<unsigned char, kSha256Bytes> Sha256::digest(std::string_view data) {
  Sha256 s;
  s.update(data);
  return s.finish();
}

}  // namespace hvdrun::rendezvous
