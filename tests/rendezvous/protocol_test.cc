// Unit tests of the rendezvous codec, HMAC and frame sealing: no sockets involved.
#include <algorithm>
#include <catch2/catch.hpp>

#include "rendezvous/protocol.h"
#include "tests/skip.h"

using namespace hvdrun::rendezvous;

TEST_CASE("request round-trips through the codec", "[rendezvous][protocol]") {
  Request r;
  r.op = Op::kMultiSet;
  r.keys = {"a", std::string("b\0c", 3)};
  r.values = {"", std::string(1000, 'x')};
  auto d = decode_request(encode(r));
  CHECK(d.op == Op::kMultiSet);
  CHECK(d.keys == r.keys);
  CHECK(d.values == r.values);

  Request w;
  w.op = Op::kWait;
  w.timeout_ms = 1234;
  w.keys = {"k1", "k2"};
  auto dw = decode_request(encode(w));
  CHECK(dw.timeout_ms == 1234);
  CHECK(dw.keys.size() == 2);

  Request a;
  a.op = Op::kAdd;
  a.keys = {"n"};
  a.delta = -42;
  CHECK(decode_request(encode(a)).delta == -42);
}

TEST_CASE("response round-trips through the codec", "[rendezvous][protocol]") {
  Response r;
  r.status = Status::kTimeout;
  r.number = 7;
  r.message = "m";
  r.values = {std::string("v"), std::nullopt, std::string()};
  r.missing = {0, 5};
  auto d = decode_response(encode(r));
  CHECK(d.status == Status::kTimeout);
  CHECK(d.number == 7);
  CHECK(d.message == "m");
  REQUIRE(d.values.size() == 3);
  CHECK(d.values[0] == "v");
  CHECK(!d.values[1]);
  CHECK(d.values[2] == "");
  CHECK(d.missing == std::vector<std::uint32_t>{0, 5});
}

TEST_CASE("malformed requests are rejected", "[rendezvous][protocol]") {
  Request r;
  r.op = Op::kSet;
  r.keys = {"k"};
  r.values = {"v"};
  auto good = encode(r);
  // Every truncation fails.
  for (std::size_t n = 0; n < good.size(); ++n)
    CHECK_THROWS_AS(decode_request(good.substr(0, n)), ProtocolError);
  // Trailing garbage fails.
  CHECK_THROWS_AS(decode_request(good + "x"), ProtocolError);
  // Unknown op.
  auto bad = good;
  bad[0] = 99;
  CHECK_THROWS_AS(decode_request(bad), ProtocolError);
  // Wrong arity: set with no value.
  Request s;
  s.op = Op::kSet;
  s.keys = {"k"};
  CHECK_THROWS_AS(decode_request(encode(s)), ProtocolError);
  // Wait with no keys.
  Request w;
  w.op = Op::kWait;
  CHECK_THROWS_AS(decode_request(encode(w)), ProtocolError);
  // A huge element count with no bytes behind it.
  std::string lie = good.substr(0, 13) + std::string("\xff\xff\xff\xff", 4);
  CHECK_THROWS_AS(decode_request(lie), ProtocolError);
  // An oversized key.
  Request big;
  big.op = Op::kGet;
  big.keys = {std::string(5000, 'k')};
  CHECK_THROWS_AS(decode_request(encode(big)), ProtocolError);
}

namespace {
std::string hex_of(const std::array<unsigned char, kMacBytes>& d) {
  return to_hex(std::string(reinterpret_cast<const char*>(d.data()), d.size()));
}
}  // namespace

TEST_CASE("SHA-256 matches the FIPS 180-4 examples, whole and in pieces",
          "[rendezvous][protocol]") {
  CHECK(hex_of(Sha256::digest("")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex_of(Sha256::digest("abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(hex_of(Sha256::digest(two_blocks)) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces so every buffering path is taken.
  Sha256 s;
  const std::string piece(997, 'a');
  std::size_t left = 1000000;
  for (std::size_t step = 1; left > 0; step = step % 997 + 7) {
    const std::size_t n = std::min({step, left, piece.size()});
    s.update(std::string_view(piece).substr(0, n));
    left -= n;
  }
  CHECK(hex_of(s.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundary (55, 56, 63, 64 bytes) against a fork of the state.
  for (std::size_t n : {55, 56, 63, 64, 119, 120}) {
    const std::string m(n, 'x');
    Sha256 a;
    a.update(m.substr(0, n / 2));
    Sha256 b = a;  // a copy continues independently
    a.update(m.substr(n / 2));
    b.update(m.substr(n / 2));
    CHECK(a.finish() == b.finish());
  }
  CHECK(hex_of(Sha256::digest(std::string(56, 'x'))) ==
        "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
}

TEST_CASE("SHA-256's x86 SHA-extension blocks agree with the portable ones",
          "[rendezvous][protocol]") {
  namespace d = hvdrun::rendezvous::sha256_detail;
#if defined(__x86_64__)
  if (!d::have_x86_sha()) HVDRUN_SKIP("this CPU has no SHA extensions");
  std::string data(64 * 37, '\0');
  std::uint32_t x = 12345;
  for (auto& c : data) c = static_cast<char>((x = x * 1103515245u + 12345u) >> 24);
  std::uint32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  d::compress_portable(a, p, 37);
  d::compress_x86_sha(b, p, 37);
  CHECK(std::equal(a, a + 8, b));
#else
  CHECK_FALSE(d::have_x86_sha());
#endif
}

TEST_CASE("HMAC-SHA256 matches RFC 4231 test vectors", "[rendezvous][protocol]") {
  Hmac h(std::string(20, '\x0b'));
  auto t = h.tag({"Hi ", "There"});
  CHECK(to_hex(std::string(reinterpret_cast<const char*>(t.data()), t.size())) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Key longer than the block size (test case 6).
  Hmac h6(std::string(131, '\xaa'));
  auto t6 = h6.tag({"Test Using Larger Than Block-Size Key - Hash Key First"});
  CHECK(to_hex(std::string(reinterpret_cast<const char*>(t6.data()), t6.size())) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test cases 2, 3 and 7: a short key, data longer than a block, both long.
  CHECK(hex_of(Hmac("Jefe").tag({"what do ya want ", "for nothing?"})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex_of(Hmac(std::string(20, '\xaa')).tag({std::string(50, '\xdd')})) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  CHECK(hex_of(h6.tag({"This is a test using a larger than block-size key and a larger than "
                       "block-size data. The key needs to be hashed before being used by the "
                       "HMAC algorithm."})) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // The tag is reusable: same input, same output.
  auto t2 = h.tag({"Hi There"});
  CHECK(tags_equal(t.data(), t2.data()));
}

TEST_CASE("sealed frames detect tampering, replay and reflection", "[rendezvous][protocol]") {
  auto key = random_bytes(32);
  FrameCodec client(key, false), server(key, true);
  auto f1 = client.seal("hello");
  auto f2 = client.seal("world");
  CHECK(get_u32(f1.data()) == f1.size() - 4);
  CHECK(server.open(f1.substr(4)) == "hello");
  // Replaying the first frame fails: the sequence number moved on.
  CHECK_THROWS_AS(server.open(f1.substr(4)), ProtocolError);
  // A flipped bit fails.
  auto tampered = f2.substr(4);
  tampered[0] ^= 1;
  CHECK_THROWS_AS(server.open(tampered), ProtocolError);
  CHECK(server.open(f2.substr(4)) == "world");
  // A server frame cannot be fed back to the server.
  auto s1 = server.seal("answer");
  FrameCodec server2(key, true);
  CHECK_THROWS_AS(server2.open(s1.substr(4)), ProtocolError);
  CHECK(client.open(s1.substr(4)) == "answer");
  // A different session key fails.
  FrameCodec other(random_bytes(32), true);
  CHECK_THROWS_AS(other.open(client.seal("x").substr(4)), ProtocolError);
  CHECK_THROWS_AS(server.open("short"), ProtocolError);
}

TEST_CASE("handshake proofs differ by role and secret", "[rendezvous][protocol]") {
  Hmac s1("secret-one"), s2("secret-two");
  auto sn = random_bytes(32), cn = random_bytes(32);
  CHECK(Handshake::client_proof(s1, sn, cn) != Handshake::server_proof(s1, sn, cn));
  CHECK(Handshake::client_proof(s1, sn, cn) != Handshake::client_proof(s2, sn, cn));
  CHECK(Handshake::session_key(s1, sn, cn) != Handshake::client_proof(s1, sn, cn));
  CHECK(Handshake::client_proof(s1, sn, cn) == Handshake::client_proof(s1, sn, cn));
}
