// GMAC over AES-128 as NIST SP 800-38D states it (see gmac.h for why it is here). The
// hardware GHASH multiplies in the bit-reflected domain (blocks byte-reversed) and folds
// four blocks per reduction: X' = (X + B0)H^4 + B1 H^3 + B2 H^2 + B3 H, the products added
// unreduced and reduced once, which is what makes it run at several bytes per cycle.
#include "rendezvous/gmac.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvdrun::rendezvous {
namespace {

// --- portable AES-128 ---

constexpr unsigned char xtime(unsigned char x) {
  return static_cast<unsigned char>((x << 1) ^ ((x & 0x80) ? 0x1b : 0));
}

constexpr unsigned char rotl8(unsigned char x, int n) {
  return static_cast<unsigned char>((x << n) | (x >> (8 - n)));
}

// The S-box from its definition: the inverse in GF(2^8) (through powers of the generator
// 3, so a compiler evaluates it in a few thousand steps), then the affine map.
constexpr std::array<unsigned char, 256> make_sbox() {
  std::array<unsigned char, 256> exp{}, log{};
  unsigned char x = 1;
  for (int i = 0; i < 255; ++i) {
    exp[static_cast<std::size_t>(i)] = x;
    log[x] = static_cast<unsigned char>(i);
    x = static_cast<unsigned char>(x ^ xtime(x));  // x * 3
  }
  std::array<unsigned char, 256> s{};
  for (int v = 0; v < 256; ++v) {
    const unsigned char inv =
        v == 0 ? 0 : exp[static_cast<std::size_t>((255 - log[static_cast<std::size_t>(v)]) % 255)];
    s[static_cast<std::size_t>(v)] = static_cast<unsigned char>(
        inv ^ rotl8(inv, 1) ^ rotl8(inv, 2) ^ rotl8(inv, 3) ^ rotl8(inv, 4) ^ 0x63);
  }
  return s;
}
constexpr std::array<unsigned char, 256> kSbox = make_sbox();

// --- hardware paths ---

#if defined(__x86_64__)
#define HVDRUN_GCM_TARGET __attribute__((target("aes,pclmul,ssse3,sse4.1")))

HVDRUN_GCM_TARGET void aes_x86_encrypt(const unsigned char* rk, const unsigned char* in,
                                       unsigned char* out) {
  const auto* k = reinterpret_cast<const __m128i*>(rk);
  __m128i x =
      _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)), _mm_load_si128(k));
  for (int r = 1; r < 10; ++r) x = _mm_aesenc_si128(x, _mm_load_si128(k + r));
  x = _mm_aesenclast_si128(x, _mm_load_si128(k + 10));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), x);
}

HVDRUN_GCM_TARGET inline __m128i bswap(__m128i x) {
  return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

// The 256-bit carry-less product of a and b, as (lo, hi).
HVDRUN_GCM_TARGET inline void clmul(__m128i a, __m128i b, __m128i& lo, __m128i& hi) {
  const __m128i t0 = _mm_clmulepi64_si128(a, b, 0x00);
  const __m128i t1 =
      _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
  const __m128i t2 = _mm_clmulepi64_si128(a, b, 0x11);
  lo = _mm_xor_si128(t0, _mm_slli_si128(t1, 8));
  hi = _mm_xor_si128(t2, _mm_srli_si128(t1, 8));
}

// The reflected product (lo, hi) shifted left by one and reduced modulo
// x^128 + x^7 + x^2 + x + 1.
HVDRUN_GCM_TARGET inline __m128i reduce(__m128i lo, __m128i hi) {
  __m128i c_lo = _mm_srli_epi32(lo, 31);
  __m128i c_hi = _mm_srli_epi32(hi, 31);
  lo = _mm_slli_epi32(lo, 1);
  hi = _mm_slli_epi32(hi, 1);
  const __m128i carry_mid = _mm_srli_si128(c_lo, 12);
  c_hi = _mm_slli_si128(c_hi, 4);
  c_lo = _mm_slli_si128(c_lo, 4);
  lo = _mm_or_si128(lo, c_lo);
  hi = _mm_or_si128(_mm_or_si128(hi, c_hi), carry_mid);

  __m128i a = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30)),
                            _mm_slli_epi32(lo, 25));
  const __m128i b = _mm_srli_si128(a, 4);
  a = _mm_slli_si128(a, 12);
  lo = _mm_xor_si128(lo, a);
  __m128i d = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2)),
                            _mm_srli_epi32(lo, 7));
  d = _mm_xor_si128(d, b);
  lo = _mm_xor_si128(lo, d);
  return _mm_xor_si128(hi, lo);
}

HVDRUN_GCM_TARGET inline __m128i gfmul(__m128i a, __m128i b) {
  __m128i lo, hi;
  clmul(a, b, lo, hi);
  return reduce(lo, hi);
}

// H^1..H^4, reflected, from H as bytes.
HVDRUN_GCM_TARGET void ghash_x86_powers(const unsigned char* h, unsigned char* powers) {
  const __m128i h1 = bswap(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  const __m128i h2 = gfmul(h1, h1);
  const __m128i h3 = gfmul(h2, h1);
  const __m128i h4 = gfmul(h3, h1);
  auto* p = reinterpret_cast<__m128i*>(powers);
  _mm_store_si128(p, h1);
  _mm_store_si128(p + 1, h2);
  _mm_store_si128(p + 2, h3);
  _mm_store_si128(p + 3, h4);
}

HVDRUN_GCM_TARGET void ghash_x86(unsigned char* state, const unsigned char* powers,
                                 const unsigned char* data, std::size_t n) {
  const auto* p = reinterpret_cast<const __m128i*>(powers);
  const __m128i h1 = _mm_load_si128(p), h2 = _mm_load_si128(p + 1);
  const __m128i h3 = _mm_load_si128(p + 2), h4 = _mm_load_si128(p + 3);
  __m128i x = bswap(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state)));
  const auto* in = reinterpret_cast<const __m128i*>(data);
  std::size_t blocks = n / 16;
  for (; blocks >= 4; blocks -= 4, in += 4) {
    __m128i lo, hi, l, h;
    clmul(_mm_xor_si128(x, bswap(_mm_loadu_si128(in))), h4, lo, hi);
    clmul(bswap(_mm_loadu_si128(in + 1)), h3, l, h);
    lo = _mm_xor_si128(lo, l);
    hi = _mm_xor_si128(hi, h);
    clmul(bswap(_mm_loadu_si128(in + 2)), h2, l, h);
    lo = _mm_xor_si128(lo, l);
    hi = _mm_xor_si128(hi, h);
    clmul(bswap(_mm_loadu_si128(in + 3)), h1, l, h);
    lo = _mm_xor_si128(lo, l);
    hi = _mm_xor_si128(hi, h);
    x = reduce(lo, hi);
  }
  for (; blocks > 0; --blocks, ++in) x = gfmul(_mm_xor_si128(x, bswap(_mm_loadu_si128(in))), h1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), bswap(x));
}
#undef HVDRUN_GCM_TARGET
#endif

std::uint64_t load_be64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void store_be64(unsigned char* p, std::uint64_t v) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<unsigned char>(v);
}

}  // namespace

namespace gmac_detail {

bool have_x86_gcm() {
#if defined(__x86_64__)
  static const bool have = __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul") &&
                           __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1");
  return have;
#else
  return false;
#endif
}

void aes_portable_expand(const unsigned char* key, unsigned char* round_keys) {
  std::memcpy(round_keys, key, 16);
  unsigned char rcon = 1;
  for (std::size_t i = 4; i < 44; ++i) {
    unsigned char t[4];
    std::memcpy(t, round_keys + 4 * (i - 1), 4);
    if (i % 4 == 0) {
      const unsigned char first = t[0];
      t[0] = static_cast<unsigned char>(kSbox[t[1]] ^ rcon);
      t[1] = kSbox[t[2]];
      t[2] = kSbox[t[3]];
      t[3] = kSbox[first];
      rcon = xtime(rcon);
    }
    for (std::size_t j = 0; j < 4; ++j)
      round_keys[4 * i + j] = static_cast<unsigned char>(round_keys[4 * (i - 4) + j] ^ t[j]);
  }
}

void aes_portable_encrypt(const unsigned char* round_keys, const unsigned char* in,
                          unsigned char* out) {
  unsigned char s[16];
  for (std::size_t i = 0; i < 16; ++i) s[i] = static_cast<unsigned char>(in[i] ^ round_keys[i]);
  for (std::size_t round = 1; round <= 10; ++round) {
    unsigned char t[16];
    // SubBytes and ShiftRows: row r of column c comes from column c + r.
    for (std::size_t c = 0; c < 4; ++c)
      for (std::size_t r = 0; r < 4; ++r) t[r + 4 * c] = kSbox[s[r + 4 * ((c + r) % 4)]];
    if (round < 10) {
      for (std::size_t c = 0; c < 4; ++c) {
        const unsigned char a0 = t[4 * c], a1 = t[4 * c + 1], a2 = t[4 * c + 2], a3 = t[4 * c + 3];
        s[4 * c] = static_cast<unsigned char>(xtime(a0) ^ xtime(a1) ^ a1 ^ a2 ^ a3);
        s[4 * c + 1] = static_cast<unsigned char>(a0 ^ xtime(a1) ^ xtime(a2) ^ a2 ^ a3);
        s[4 * c + 2] = static_cast<unsigned char>(a0 ^ a1 ^ xtime(a2) ^ xtime(a3) ^ a3);
        s[4 * c + 3] = static_cast<unsigned char>(xtime(a0) ^ a0 ^ a1 ^ a2 ^ xtime(a3));
      }
    } else {
      std::memcpy(s, t, 16);
    }
    for (std::size_t i = 0; i < 16; ++i) s[i] ^= round_keys[16 * round + i];
  }
  std::memcpy(out, s, 16);
}

void ghash_portable(unsigned char* state, const unsigned char* h, const unsigned char* data,
                    std::size_t n) {
  const std::uint64_t h_hi = load_be64(h), h_lo = load_be64(h + 8);
  std::uint64_t x_hi = load_be64(state), x_lo = load_be64(state + 8);
  for (std::size_t off = 0; off + 16 <= n; off += 16) {
    x_hi ^= load_be64(data + off);
    x_lo ^= load_be64(data + off + 8);
    // SP 800-38D algorithm 1: Z = X * H, bit 0 the most significant bit of byte 0.
    std::uint64_t z_hi = 0, z_lo = 0, v_hi = h_hi, v_lo = h_lo;
    for (int i = 0; i < 128; ++i) {
      const std::uint64_t bit = i < 64 ? (x_hi >> (63 - i)) & 1 : (x_lo >> (127 - i)) & 1;
      const std::uint64_t mask = 0 - bit;
      z_hi ^= v_hi & mask;
      z_lo ^= v_lo & mask;
      const std::uint64_t lsb = v_lo & 1;
      v_lo = (v_lo >> 1) | (v_hi << 63);
      v_hi = (v_hi >> 1) ^ ((0 - lsb) & 0xe100000000000000ULL);
    }
    x_hi = z_hi;
    x_lo = z_lo;
  }
  store_be64(state, x_hi);
  store_be64(state + 8, x_lo);
}

}  // namespace gmac_detail

Aes128::Aes128(const unsigned char* key) : hardware_(gmac_detail::have_x86_gcm()) {
  gmac_detail::aes_portable_expand(key, round_keys_.data());
}

void Aes128::encrypt(const unsigned char* in, unsigned char* out) const {
#if defined(__x86_64__)
  if (hardware_) return aes_x86_encrypt(round_keys_.data(), in, out);
#endif
  gmac_detail::aes_portable_encrypt(round_keys_.data(), in, out);
}

GmacKey::GmacKey(const unsigned char* key) : aes_(key), hardware_(gmac_detail::have_x86_gcm()) {
  const std::array<unsigned char, 16> zero{};
  aes_.encrypt(zero.data(), h_.data());
#if defined(__x86_64__)
  if (hardware_) ghash_x86_powers(h_.data(), powers_.data());
#endif
}

std::array<unsigned char, kGmacTagBytes> GmacKey::tag(const unsigned char* iv,
                                                      const unsigned char* data,
                                                      std::size_t n) const {
  GmacStream s(*this);
  s.update(data, n);
  return s.finish(iv);
}

void GmacStream::blocks(const unsigned char* data, std::size_t n) {
#if defined(__x86_64__)
  if (key_.hardware_) return ghash_x86(state_.data(), key_.powers_.data(), data, n);
#endif
  gmac_detail::ghash_portable(state_.data(), key_.h_.data(), data, n);
}

void GmacStream::update(const unsigned char* data, std::size_t n) {
  length_ += n;
  if (used_ > 0) {
    const std::size_t take = std::min(n, partial_.size() - used_);
    std::memcpy(partial_.data() + used_, data, take);
    used_ += take;
    data += take;
    n -= take;
    if (used_ < partial_.size()) return;
    blocks(partial_.data(), partial_.size());
    used_ = 0;
  }
  const std::size_t whole = n & ~std::size_t{15};
  if (whole > 0) blocks(data, whole);
  if (n > whole) {
    std::memcpy(partial_.data(), data + whole, n - whole);
    used_ = n - whole;
  }
}

std::array<unsigned char, kGmacTagBytes> GmacStream::finish(const unsigned char* iv) {
  if (used_ > 0) {
    std::memset(partial_.data() + used_, 0, partial_.size() - used_);
    blocks(partial_.data(), partial_.size());
    used_ = 0;
  }
  // The lengths block: the additional data's length in bits, then the (empty) text's.
  std::array<unsigned char, 16> lengths{};
  store_be64(lengths.data(), length_ * 8);
  blocks(lengths.data(), lengths.size());
  std::array<unsigned char, 16> j0{};
  std::memcpy(j0.data(), iv, kGmacIvBytes);
  j0[15] = 1;
  std::array<unsigned char, kGmacTagBytes> out{};
  key_.aes_.encrypt(j0.data(), out.data());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] ^= state_[i];
  return out;
}

void GmacStream::reset() {
  state_.fill(0);
  used_ = 0;
  length_ = 0;
}

bool gmac_tags_equal(const unsigned char* a, const unsigned char* b) {
  unsigned char diff = 0;
  for (std::size_t i = 0; i < kGmacTagBytes; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace hvdrun::rendezvous
