#include "common/control_protocol.h"

#include <type_traits>

#include "common/wire.h"

namespace hvdrun::control {

namespace {

enum class Type : std::uint8_t { elastic = 1, left = 2, end_generation = 3, placement = 4 };

// A frame: its length (the type byte and the fields), its type, the fields in `w`.
std::string frame(const wire::Writer& w, Type type) {
  if (w.size() + 1 > kMaxFrameBytes)
    throw ProtocolError("control channel: a frame of " + std::to_string(w.size() + 1) +
                        " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
  wire::Writer head;
  head.u32(static_cast<std::uint32_t>(w.size() + 1));
  head.u8(static_cast<std::uint8_t>(type));
  return head.take() + w.bytes();
}

[[noreturn]] void malformed(wire::Problem problem, std::size_t n) {
  if (problem == wire::Problem::trailing)
    throw ProtocolError("control channel: " + std::to_string(n) +
                        " bytes left over after a frame's fields");
  throw ProtocolError("control channel: a frame is truncated");
}

using Reader = wire::Reader<void (*)(wire::Problem, std::size_t)>;

bool flag(Reader& r) {
  const auto v = r.u8();
  if (v > 1) throw ProtocolError("control channel: a boolean field holds " + std::to_string(v));
  return v == 1;
}

}  // namespace

std::string encode(const Message& msg) {
  wire::Writer w;
  return std::visit(
      [&w](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Elastic>) {
          w.i32(m.generation);
          return frame(w, Type::elastic);
        } else if constexpr (std::is_same_v<T, Left>) {
          w.i32(m.generation);
          return frame(w, Type::left);
        } else if constexpr (std::is_same_v<T, EndGeneration>) {
          w.i32(m.generation);
          w.str(m.reason);
          return frame(w, Type::end_generation);
        } else {
          for (std::int32_t v : {m.generation, m.rank, m.size, m.local_rank, m.local_size,
                                 m.cross_rank, m.cross_size})
            w.i32(v);
          w.str(m.rendezvous_addr);
          w.u32(m.rendezvous_port);
          w.str(m.secret);
          for (bool b : {m.hosts_added, m.hosts_removed, m.failure}) w.u8(b ? 1 : 0);
          return frame(w, Type::placement);
        }
      },
      msg);
}

std::optional<Message> Decoder::next() {
  if (buf_.size() < 4) return std::nullopt;
  const std::uint32_t len = wire::get_u32(buf_.data());
  if (len == 0 || len > kMaxFrameBytes)
    throw ProtocolError("control channel: a frame of " + std::to_string(len) + " bytes (at most " +
                        std::to_string(kMaxFrameBytes) + ", at least 1)");
  if (buf_.size() - 4 < len) return std::nullopt;
  Reader r(std::string_view(buf_).substr(5, len - 1), &malformed);
  const auto type = static_cast<std::uint8_t>(buf_[4]);
  Message out;
  switch (static_cast<Type>(type)) {
    case Type::elastic:
      out = Elastic{r.i32()};
      break;
    case Type::left:
      out = Left{r.i32()};
      break;
    case Type::end_generation: {
      EndGeneration m;
      m.generation = r.i32();
      m.reason = r.str();
      out = std::move(m);
      break;
    }
    case Type::placement: {
      Placement m;
      for (std::int32_t* v : {&m.generation, &m.rank, &m.size, &m.local_rank, &m.local_size,
                              &m.cross_rank, &m.cross_size})
        *v = r.i32();
      m.rendezvous_addr = r.str();
      const std::uint32_t port = r.u32();
      if (port > 65535)
        throw ProtocolError("control channel: a placement's port " + std::to_string(port) +
                            " is out of range");
      m.rendezvous_port = static_cast<std::uint16_t>(port);
      m.secret = r.str();
      m.hosts_added = flag(r);
      m.hosts_removed = flag(r);
      m.failure = flag(r);
      out = std::move(m);
      break;
    }
    default:
      throw ProtocolError("control channel: unknown frame type " + std::to_string(type));
  }
  r.done();
  buf_.erase(0, 4 + static_cast<std::size_t>(len));
  return out;
}

}  // namespace hvdrun::control
