// Unit tests of the rendezvous codec, HMAC and frame sealing: no sockets involved.
#include <catch2/catch.hpp>

#include "rendezvous/protocol.h"

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
