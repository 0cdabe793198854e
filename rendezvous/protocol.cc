// Codec, HMAC and frame sealing of the rendezvous protocol (see protocol.h and
// docs/rendezvous-protocol.md).
#include "rendezvous/protocol.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace hvdrun::rendezvous {
namespace {

// Bounds that keep a hostile payload from making the server allocate without limit
// beyond the frame cap itself.
constexpr std::uint32_t kMaxKeys = 1u << 20;
constexpr std::uint32_t kMaxKeyBytes = 4096;

using Writer = wire::Writer;

[[noreturn]] void malformed(wire::Problem problem, std::size_t /*n*/) {
  throw ProtocolError(problem == wire::Problem::trailing ? "trailing bytes after message"
                                                         : "truncated message");
}

// wire::Reader with the rendezvous protocol's bounds on strings and counts.
class Reader {
 public:
  explicit Reader(std::string_view in) : r_(in, &malformed) {}
  std::uint8_t u8() { return r_.u8(); }
  std::uint32_t u32() { return r_.u32(); }
  std::uint64_t u64() { return r_.u64(); }
  std::string str(std::uint32_t limit) {
    auto n = r_.length();
    if (n > limit) throw ProtocolError("string of " + std::to_string(n) + " bytes exceeds limit");
    return std::string(r_.view(n));
  }
  std::uint32_t count(std::uint32_t limit) {
    auto n = r_.u32();
    // Each element takes at least 4 bytes, so a count beyond that is a lie.
    if (n > limit || n > r_.left() / 4 + 1)
      throw ProtocolError("element count " + std::to_string(n) + " is implausible");
    return n;
  }
  void done() const { r_.done(); }

 private:
  wire::Reader<void (*)(wire::Problem, std::size_t)> r_;
};

}  // namespace

std::string plain_frame(std::string_view payload) {
  std::string out(4, '\0');
  put_u32(out.data(), static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kWait:
      return "wait";
    case Op::kAdd:
      return "add";
    case Op::kMultiGet:
      return "multi_get";
    case Op::kMultiSet:
      return "multi_set";
    case Op::kDelete:
      return "delete";
    case Op::kPing:
      return "ping";
  }
  return "unknown";
}

std::string encode(const Request& r) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(r.op));
  w.u32(r.timeout_ms);
  w.u64(static_cast<std::uint64_t>(r.delta));
  w.u32(static_cast<std::uint32_t>(r.keys.size()));
  for (const auto& k : r.keys) w.str(k);
  w.u32(static_cast<std::uint32_t>(r.values.size()));
  for (const auto& v : r.values) w.str(v);
  return w.take();
}

Request decode_request(std::string_view payload) {
  Reader rd(payload);
  Request r;
  auto op = rd.u8();
  if (op < 1 || op > 8) throw ProtocolError("unknown operation " + std::to_string(op));
  r.op = static_cast<Op>(op);
  r.timeout_ms = rd.u32();
  r.delta = static_cast<std::int64_t>(rd.u64());
  auto nkeys = rd.count(kMaxKeys);
  r.keys.reserve(nkeys);
  for (std::uint32_t i = 0; i < nkeys; ++i) r.keys.push_back(rd.str(kMaxKeyBytes));
  auto nvalues = rd.count(kMaxKeys);
  r.values.reserve(nvalues);
  for (std::uint32_t i = 0; i < nvalues; ++i) r.values.push_back(rd.str(kMaxFrameBytes));
  rd.done();

  auto expect = [&](bool ok, const char* what) {
    if (!ok) throw ProtocolError(std::string(op_name(r.op)) + ": " + what);
  };
  switch (r.op) {
    case Op::kSet:
      expect(r.keys.size() == 1 && r.values.size() == 1, "needs one key and one value");
      break;
    case Op::kGet:
    case Op::kAdd:
    case Op::kDelete:
      expect(r.keys.size() == 1 && r.values.empty(), "needs exactly one key");
      break;
    case Op::kWait:
    case Op::kMultiGet:
      expect(!r.keys.empty() && r.values.empty(), "needs at least one key");
      break;
    case Op::kMultiSet:
      expect(!r.keys.empty() && r.keys.size() == r.values.size(), "needs one value per key");
      break;
    case Op::kPing:
      expect(r.keys.empty() && r.values.empty(), "takes no keys");
      break;
  }
  return r;
}

std::string encode(const Response& r) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(r.status));
  w.u64(static_cast<std::uint64_t>(r.number));
  w.str(r.message);
  w.u32(static_cast<std::uint32_t>(r.values.size()));
  for (const auto& v : r.values) {
    w.u8(v ? 1 : 0);
    if (v) w.str(*v);
  }
  w.u32(static_cast<std::uint32_t>(r.missing.size()));
  for (auto m : r.missing) w.u32(m);
  return w.take();
}

Response decode_response(std::string_view payload) {
  Reader rd(payload);
  Response r;
  auto st = rd.u8();
  if (st > 4) throw ProtocolError("unknown status " + std::to_string(st));
  r.status = static_cast<Status>(st);
  r.number = static_cast<std::int64_t>(rd.u64());
  r.message = rd.str(kMaxFrameBytes);
  auto n = rd.count(kMaxKeys);
  r.values.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (rd.u8() != 0)
      r.values.emplace_back(rd.str(kMaxFrameBytes));
    else
      r.values.emplace_back(std::nullopt);
  }
  auto m = rd.count(kMaxKeys);
  for (std::uint32_t i = 0; i < m; ++i) r.missing.push_back(rd.u32());
  rd.done();
  return r;
}

// --- HMAC -------------------------------------------------------------------------

Hmac::Hmac(std::string_view key) {
  std::array<unsigned char, kSha256BlockBytes> k{};
  if (key.size() > k.size()) {
    const auto d = Sha256::digest(key);
    std::memcpy(k.data(), d.data(), d.size());
  } else {
    std::memcpy(k.data(), key.data(), key.size());
  }
  std::array<unsigned char, kSha256BlockBytes> ipad{}, opad{};
  for (std::size_t i = 0; i < k.size(); ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  inner_.update(ipad.data(), ipad.size());
  outer_.update(opad.data(), opad.size());
  explicit_bzero(k.data(), k.size());
  explicit_bzero(ipad.data(), ipad.size());
  explicit_bzero(opad.data(), opad.size());
}

std::array<unsigned char, kMacBytes> Hmac::tag(
    std::initializer_list<std::string_view> parts) const {
  Sha256 inner = inner_;
  for (auto p : parts) inner.update(p);
  const auto inner_hash = inner.finish();
  Sha256 outer = outer_;
  outer.update(inner_hash.data(), inner_hash.size());
  return outer.finish();
}

bool tags_equal(const unsigned char* a, const unsigned char* b) {
  // Every byte is compared whatever the earlier ones were: the time does not say where
  // a forged tag first differs.
  volatile unsigned char diff = 0;
  for (std::size_t i = 0; i < kMacBytes; ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(),
                              "getrandom: no entropy for the rendezvous secret");
    }
    got += static_cast<std::size_t>(r);
  }
  return out;
}

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

namespace {
std::string tag_string(const Hmac& h, std::string_view label, std::string_view a,
                       std::string_view b) {
  auto t = h.tag({label, a, b});
  return std::string(reinterpret_cast<const char*>(t.data()), t.size());
}
}  // namespace

std::string Handshake::client_proof(const Hmac& secret, std::string_view server_nonce,
                                    std::string_view client_nonce) {
  return tag_string(secret, "hvdrun-rdzv client", server_nonce, client_nonce);
}
std::string Handshake::server_proof(const Hmac& secret, std::string_view server_nonce,
                                    std::string_view client_nonce) {
  return tag_string(secret, "hvdrun-rdzv server", server_nonce, client_nonce);
}
std::string Handshake::session_key(const Hmac& secret, std::string_view server_nonce,
                                   std::string_view client_nonce) {
  return tag_string(secret, "hvdrun-rdzv session", server_nonce, client_nonce);
}

// --- frames -----------------------------------------------------------------------

FrameCodec::FrameCodec(std::string_view session_key, bool is_server)
    : mac_(session_key), send_dir_(is_server ? 'S' : 'C'), recv_dir_(is_server ? 'C' : 'S') {}

namespace {
std::string seq_bytes(char dir, std::uint64_t seq) {
  std::string s(9, '\0');
  s[0] = dir;
  put_u32(s.data() + 1, static_cast<std::uint32_t>(seq >> 32));
  put_u32(s.data() + 5, static_cast<std::uint32_t>(seq));
  return s;
}
}  // namespace

std::string FrameCodec::seal(std::string_view payload) {
  if (payload.size() + kMacBytes > kMaxFrameBytes)
    throw ProtocolError("message of " + std::to_string(payload.size()) +
                        " bytes exceeds the rendezvous frame limit of " +
                        std::to_string(kMaxFrameBytes) + " bytes");
  auto t = mac_.tag({seq_bytes(send_dir_, send_seq_++), payload});
  std::string out;
  out.reserve(4 + payload.size() + kMacBytes);
  out.resize(4);
  put_u32(out.data(), static_cast<std::uint32_t>(payload.size() + kMacBytes));
  out.append(payload);
  out.append(reinterpret_cast<const char*>(t.data()), t.size());
  return out;
}

std::string FrameCodec::open(std::string_view body) {
  if (body.size() < kMacBytes) throw ProtocolError("frame shorter than its MAC");
  auto payload = body.substr(0, body.size() - kMacBytes);
  auto t = mac_.tag({seq_bytes(recv_dir_, recv_seq_), payload});
  if (!tags_equal(t.data(), reinterpret_cast<const unsigned char*>(body.data() + payload.size())))
    throw ProtocolError("frame MAC mismatch (forged, replayed or corrupted frame)");
  ++recv_seq_;
  return std::string(payload);
}

}  // namespace hvdrun::rendezvous
