// The rendezvous wire protocol shared by the server (launcher side) and the client
// (every rank): request/response codec, HMAC-SHA256 under the per-job secret, the
// connect-time challenge-response and the per-frame MAC. docs/rendezvous-protocol.md
// describes the bytes; this file is the only place that knows them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/wire.h"
#include "rendezvous/sha256.h"

namespace hvdrun::rendezvous {

/// Largest frame body (payload + MAC) either side accepts. A peer announcing more is
/// dropped before a byte of the body is read.
inline constexpr std::uint32_t kMaxFrameBytes = 16u << 20;
/// Size of an HMAC-SHA256 tag and of each handshake nonce.
inline constexpr std::size_t kMacBytes = 32;
/// First bytes of the server's greeting; names the protocol and its version.
inline constexpr std::string_view kGreeting = "HVDRUN-RDZV/1";

/// A frame or message that does not follow the protocol (truncated, oversized, bad MAC).
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Store operations. Values are stable: they are on the wire.
enum class Op : std::uint8_t {
  kSet = 1,       ///< keys[0] = values[0]; wakes waiters.
  kGet = 2,       ///< value of keys[0] now, or kNotFound.
  kWait = 3,      ///< until every key exists or timeout_ms passes (server-side deadline).
  kAdd = 4,       ///< keys[0] += delta (absent counts as 0); returns the new value.
  kMultiGet = 5,  ///< values of all keys now; absent ones flagged.
  kMultiSet = 6,  ///< keys[i] = values[i] for all i, atomically with respect to waiters.
  kDelete = 7,    ///< removes keys[0]; number = 1 when it existed.
  kPing = 8,      ///< no-op round trip.
};

/// Outcome of one request. Values are stable: they are on the wire.
enum class Status : std::uint8_t {
  kOk = 0,
  kNotFound = 1,    ///< kGet of an absent key.
  kTimeout = 2,     ///< kWait deadline passed; `missing` lists the absent keys' indices.
  kBadRequest = 3,  ///< well-formed frame, nonsensical request; `message` says why.
  kStopping = 4,    ///< the server is shutting down; the connection closes after this.
};

/// Human-readable name of an operation ("set", "wait", ...).
const char* op_name(Op op);

/// One client request.
struct Request {
  Op op = Op::kPing;                ///< What to do.
  std::uint32_t timeout_ms = 0;     ///< kWait only: server-side deadline.
  std::int64_t delta = 0;           ///< kAdd only.
  std::vector<std::string> keys;    ///< Keys the operation applies to.
  std::vector<std::string> values;  ///< kSet / kMultiSet: one value per key.
};

/// One server response.
struct Response {
  Status status = Status::kOk;                     ///< Outcome.
  std::int64_t number = 0;                         ///< kAdd: new value; kDelete: existed.
  std::string message;                             ///< kBadRequest / kStopping: why.
  std::vector<std::optional<std::string>> values;  ///< kGet / kMultiGet results.
  std::vector<std::uint32_t> missing;              ///< kTimeout: indices of absent keys.
};

/// Serialises a request payload (no framing, no MAC).
std::string encode(const Request& request);
/// Parses and validates a request payload. Throws ProtocolError.
Request decode_request(std::string_view payload);
/// Serialises a response payload.
std::string encode(const Response& response);
/// Parses a response payload. Throws ProtocolError.
Response decode_response(std::string_view payload);

/// HMAC-SHA256 (RFC 2104) with the key's inner and outer hash states computed once, so
/// each tag costs two hash continuations instead of a key schedule. The digest is the
/// library's own (rendezvous/sha256.h): nothing here calls into a crypto library that
/// another library in the process could interpose.
class Hmac {
 public:
  /// Prepares the key.
  explicit Hmac(std::string_view key);

  /// Tag over the concatenation of `parts`.
  std::array<unsigned char, kMacBytes> tag(std::initializer_list<std::string_view> parts) const;

 private:
  Sha256 inner_;
  Sha256 outer_;
};

/// Constant-time comparison of two tags.
bool tags_equal(const unsigned char* a, const unsigned char* b);

/// `n` cryptographically random bytes from the kernel (getrandom(2)). Throws on failure.
std::string random_bytes(std::size_t n);
/// Lower-case hex of `bytes`.
std::string to_hex(std::string_view bytes);

/// Connect-time challenge-response under the job secret, shared by both sides.
/// Server greets with a nonce, the client answers with its nonce and a proof, the server
/// answers with its own proof; both then derive the session key from the two nonces.
struct Handshake {
  /// Proof the client sends: HMAC(secret, "hvdrun-rdzv client" | server_nonce | client_nonce).
  static std::string client_proof(const Hmac& secret, std::string_view server_nonce,
                                  std::string_view client_nonce);
  /// Proof the server returns: HMAC(secret, "hvdrun-rdzv server" | server_nonce | client_nonce).
  static std::string server_proof(const Hmac& secret, std::string_view server_nonce,
                                  std::string_view client_nonce);
  /// Session key: HMAC(secret, "hvdrun-rdzv session" | server_nonce | client_nonce).
  static std::string session_key(const Hmac& secret, std::string_view server_nonce,
                                 std::string_view client_nonce);
};

/// Per-connection frame sealing: every frame after the handshake is
/// `u32 length | payload | HMAC(session, direction | u64 sequence | payload)`, with an
/// implicit sequence number per direction, so frames cannot be forged, replayed,
/// reordered or reflected.
class FrameCodec {
 public:
  /// `is_server` picks which direction byte is used for sending and which for receiving.
  FrameCodec(std::string_view session_key, bool is_server);

  /// Whole frame (length prefix included) carrying `payload`.
  std::string seal(std::string_view payload);
  /// Checks the MAC of a frame body (what follows the length prefix) and returns its
  /// payload. Throws ProtocolError on a bad MAC or a body shorter than a tag.
  std::string open(std::string_view body);

 private:
  Hmac mac_;
  char send_dir_;
  char recv_dir_;
  std::uint64_t send_seq_ = 0;
  std::uint64_t recv_seq_ = 0;
};

/// Big-endian u32s, as every hvdrun wire protocol writes them (common/wire.h).
using wire::get_u32;
using wire::put_u32;
/// Unauthenticated length-prefixed frame, used only for the handshake messages.
std::string plain_frame(std::string_view payload);

}  // namespace hvdrun::rendezvous
