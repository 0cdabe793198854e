// The control channel between a host's agent and one of its ranks (in-process elastic
// recovery, docs/elastic.md): a socketpair the agent hands the rank at spawn
// (HVDRUN_CONTROL_FD). The agent says when the rank's generation ends and where the rank
// is in the next one; the rank says that it uses the elastic API and when it has left a
// generation. Both ends are built from this file (launcher/agent/agent_control.cc, runtime/).
//
// Wire format, as the agent protocol's (docs/agent-protocol.md) but its own type codes:
//     u32 length (big-endian; counts the type byte and the payload) | u8 type | payload
// integers big-endian, strings as u32 length + bytes, booleans as one byte 0 or 1.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

namespace hvdrun::control {

/// Largest frame accepted (type byte + payload).
inline constexpr std::uint32_t kMaxFrameBytes = 64u << 10;

/// A frame that cannot be right: oversized, truncated, trailing bytes, unknown type.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// rank -> agent: this rank runs under hvd.elastic.run (generation: the one it is in).
struct Elastic {
  std::int32_t generation = 0;
  bool operator==(const Elastic&) const = default;
};
/// rank -> agent: this rank has shut down `generation` and waits for its placement.
struct Left {
  std::int32_t generation = 0;
  bool operator==(const Left&) const = default;
};
/// agent -> rank: `generation` is over; every collective of it fails with `reason`.
struct EndGeneration {
  std::int32_t generation = 0;
  std::string reason;
  bool operator==(const EndGeneration&) const = default;
};
/// agent -> rank: where the rank is in `generation` (the next one). With `failure` the
/// current generation ends now (an EndGeneration precedes it); without, the rank moves
/// at its next commit() (hosts were added).
struct Placement {
  std::int32_t generation = 0;
  std::int32_t rank = 0;
  std::int32_t size = 1;
  std::int32_t local_rank = 0;
  std::int32_t local_size = 1;
  std::int32_t cross_rank = 0;
  std::int32_t cross_size = 1;
  std::string rendezvous_addr;
  std::uint16_t rendezvous_port = 0;
  std::string secret;  ///< hex, as HVDRUN_SECRET
  bool hosts_added = false;
  bool hosts_removed = false;
  bool failure = false;
  bool operator==(const Placement&) const = default;
};

using Message = std::variant<Elastic, Left, EndGeneration, Placement>;

/// The frame of `msg`. Throws ProtocolError when it exceeds kMaxFrameBytes.
std::string encode(const Message& msg);

/// Incremental decoder: feed bytes as they arrive, take messages with next().
class Decoder {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  /// The next complete message, or nullopt when more bytes are needed. Throws
  /// ProtocolError on a malformed frame.
  std::optional<Message> next();
  /// Bytes received but not yet decoded (a partial frame at end of file is an error).
  std::size_t buffered() const { return buf_.size(); }

 private:
  std::string buf_;
};

}  // namespace hvdrun::control
