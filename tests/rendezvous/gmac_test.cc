// GMAC (rendezvous/gmac.h): AES-128 against FIPS 197, GHASH and the tag against the GCM
// specification's test cases, the hardware and portable paths against each other, and the
// incremental interface against the one-shot one for every way of splitting a message.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "rendezvous/gmac.h"

using namespace hvdrun::rendezvous;

namespace {

std::vector<unsigned char> unhex(const std::string& s) {
  std::vector<unsigned char> out;
  for (std::size_t i = 0; i + 1 < s.size(); i += 2)
    out.push_back(static_cast<unsigned char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return out;
}

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

template <typename A>
std::string hex(const A& a) {
  return hex(a.data(), a.size());
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 7 + seed);
  return v;
}

}  // namespace

TEST_CASE("AES-128 matches FIPS 197 appendix C.1 on both paths", "[gmac]") {
  const auto key = unhex("000102030405060708090a0b0c0d0e0f");
  const auto pt = unhex("00112233445566778899aabbccddeeff");
  std::array<unsigned char, 176> rk{};
  gmac_detail::aes_portable_expand(key.data(), rk.data());
  std::array<unsigned char, 16> out{};
  gmac_detail::aes_portable_encrypt(rk.data(), pt.data(), out.data());
  CHECK(hex(out) == "69c4e0d86a7b0430d8cdb78070b4c55a");
  out.fill(0);
  Aes128(key.data()).encrypt(pt.data(), out.data());  // the hardware path where there is one
  CHECK(hex(out) == "69c4e0d86a7b0430d8cdb78070b4c55a");
}

TEST_CASE("GCM specification test cases 1 and 2 (zero key and IV)", "[gmac]") {
  const std::array<unsigned char, 16> key{};
  const std::array<unsigned char, 12> iv{};
  GmacKey k(key.data());
  // Test case 1: no data at all.
  CHECK(hex(k.tag(iv.data(), nullptr, 0)) == "58e2fccefa7e3061367f1d57a4e7455a");
  // Test case 2: GHASH over its one ciphertext block (a GMAC has no ciphertext, so the tag
  // is composed here from the parts: E(K, J0) + GHASH(H, C | lengths)).
  std::array<unsigned char, 16> h{}, zero{};
  Aes128 aes(key.data());
  aes.encrypt(zero.data(), h.data());
  CHECK(hex(h) == "66e94bd4ef8a2c3b884cfa59ca342b2e");
  auto c = unhex("0388dace60b6a392f328c2b971b2fe78");
  auto lengths = unhex("00000000000000000000000000000080");
  c.insert(c.end(), lengths.begin(), lengths.end());
  std::array<unsigned char, 16> s{};
  gmac_detail::ghash_portable(s.data(), h.data(), c.data(), c.size());
  std::array<unsigned char, 16> j0{}, mask{};
  j0[15] = 1;
  aes.encrypt(j0.data(), mask.data());
  for (std::size_t i = 0; i < 16; ++i) s[i] ^= mask[i];
  CHECK(hex(s) == "ab6e47d42cec13bdf53a67b21257bddf");
}

TEST_CASE("GMAC tags of additional data match AES-GCM with no plaintext", "[gmac]") {
  // Computed with an independent AES-GCM (OpenSSL): key, IV, data length, tag; the data
  // is byte i = (7 i + length) mod 256.
  struct Vector {
    std::size_t n;
    const char* key;
    const char* iv;
    const char* tag;
  };
  const Vector vectors[] = {
      {1, "6ab9f1eb8f7d3388f4f9d586f66e99fd", "4cd9b7672d7fbee8fb51fb1e",
       "a6aefd0920aa6ad5de22bc54d4dbd63a"},
      {15, "5bd4ca497530b4b3490e350f3590bba9", "bb5853ce561874ca60657929",
       "48a2d62552c160657d579fc6a651e2c5"},
      {16, "8d68c655677c5c72d8118949e8997571", "7daa2b32ed44f20a09e879c2",
       "d4a6a51aff05dfe858eac73cec664d32"},
      {17, "6c47c1de66e7e5ebd7b1fe0746ea1a36", "76cc8d5592a3146e19665644",
       "5e81d66278b6de84288c1670159555c6"},
      {63, "32fdefc7a4275265dc4f0115eb325f7a", "670e0adab66b3c8d8bd8d537",
       "0b2bca22a53dac19a694d33eebb16d08"},
      {64, "6fc10b7e5ca73348f06f158655109b55", "1a91deb3742283487d66c3b5",
       "e4cdfd17771382a502a776e55abe7819"},
      {65, "b66f6e5a0c22cea447ead7edf7c46e12", "ad9add29dd4346f511eb32c8",
       "19c4bfd7931487fc88a7839a0ccb1422"},
      {100, "3e0f31e9a388216522cc5b5ab544bbea", "fcef3963f5be4e78da91c2db",
       "583d726585ad8ca431ae7b4f9d7fd090"},
      {1000, "b881b159e75835b2a288f68f086d32e3", "a3346d18105ef801c3598fec",
       "10c190285799218d1e4d191002dd2e0b"},
  };
  for (const auto& v : vectors) {
    INFO("length " << v.n);
    const auto data = pattern(v.n, static_cast<unsigned>(v.n));
    GmacKey k(unhex(v.key).data());
    CHECK(hex(k.tag(unhex(v.iv).data(), data.data(), data.size())) == v.tag);
  }
}

TEST_CASE("hardware and portable GHASH agree", "[gmac]") {
  if (!gmac_detail::have_x86_gcm()) SUCCEED("no PCLMULQDQ here: only the portable path runs");
  const auto key = pattern(16, 3);
  GmacKey k(key.data());
  std::array<unsigned char, 16> h{}, zero{};
  Aes128(key.data()).encrypt(zero.data(), h.data());
  for (std::size_t blocks : {1u, 3u, 4u, 5u, 8u, 13u, 64u}) {
    const auto data = pattern(16 * blocks, static_cast<unsigned>(blocks));
    GmacStream s(k);
    s.update(data.data(), data.size());
    std::array<unsigned char, 12> iv{};
    const auto fast = s.finish(iv.data());
    // The portable composition of the same tag.
    std::vector<unsigned char> msg = data;
    std::array<unsigned char, 16> lengths{};
    const std::uint64_t bits = data.size() * 8;
    for (int i = 0; i < 8; ++i) lengths[7 - i] = static_cast<unsigned char>(bits >> (8 * i));
    msg.insert(msg.end(), lengths.begin(), lengths.end());
    std::array<unsigned char, 16> st{}, j0{}, mask{};
    gmac_detail::ghash_portable(st.data(), h.data(), msg.data(), msg.size());
    j0[15] = 1;
    Aes128(key.data()).encrypt(j0.data(), mask.data());
    for (std::size_t i = 0; i < 16; ++i) st[i] ^= mask[i];
    INFO(blocks << " blocks");
    CHECK(hex(fast) == hex(st));
  }
}

TEST_CASE("an incremental tag equals the one-shot tag however the message is split", "[gmac]") {
  const auto key = pattern(16, 9);
  GmacKey k(key.data());
  const auto data = pattern(1037, 5);
  const auto iv = pattern(12, 1);
  const auto whole = k.tag(iv.data(), data.data(), data.size());
  for (std::size_t piece : {1u, 5u, 16u, 17u, 63u, 64u, 100u, 1000u}) {
    GmacStream s(k);
    for (std::size_t off = 0; off < data.size(); off += piece)
      s.update(data.data() + off, std::min(piece, data.size() - off));
    INFO("pieces of " << piece);
    CHECK(hex(s.finish(iv.data())) == hex(whole));
    s.reset();
    s.update(data.data(), data.size());
    CHECK(hex(s.finish(iv.data())) == hex(whole));
  }
  // Any changed bit, IV or length changes the tag.
  auto changed = data;
  changed[500] ^= 0x10;
  CHECK(hex(k.tag(iv.data(), changed.data(), changed.size())) != hex(whole));
  auto iv2 = iv;
  iv2[11] ^= 1;
  CHECK(hex(k.tag(iv2.data(), data.data(), data.size())) != hex(whole));
  CHECK(hex(k.tag(iv.data(), data.data(), data.size() - 1)) != hex(whole));
  CHECK(gmac_tags_equal(whole.data(), whole.data()));
  auto other = whole;
  other[15] ^= 1;
  CHECK_FALSE(gmac_tags_equal(whole.data(), other.data()));
}
