#include "common/control_protocol.h"

#include <type_traits>

namespace hvdrun::control {

namespace {

enum class Type : std::uint8_t { elastic = 1, left = 2, end_generation = 3, placement = 4 };

class Writer {
 public:
  void u8(std::uint8_t v) { s_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) u8(static_cast<std::uint8_t>(v >> shift));
  }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void str(const std::string& v) {
    u32(static_cast<std::uint32_t>(v.size()));
    s_ += v;
  }
  std::string frame(Type type) const {
    if (s_.size() + 1 > kMaxFrameBytes)
      throw ProtocolError("control channel: a frame of " + std::to_string(s_.size() + 1) +
                          " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
    Writer head;
    head.u32(static_cast<std::uint32_t>(s_.size() + 1));
    head.u8(static_cast<std::uint8_t>(type));
    return head.s_ + s_;
  }

 private:
  std::string s_;
};

class Reader {
 public:
  explicit Reader(std::string_view p) : p_(p) {}
  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(p_[at_++]);
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | u8();
    return v;
  }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  bool flag() {
    const auto v = u8();
    if (v > 1) throw ProtocolError("control channel: a boolean field holds " + std::to_string(v));
    return v == 1;
  }
  std::string str() {
    const std::uint32_t n = u32();
    need(n);
    std::string v(p_.substr(at_, n));
    at_ += n;
    return v;
  }
  void end() const {
    if (at_ != p_.size())
      throw ProtocolError("control channel: " + std::to_string(p_.size() - at_) +
                          " bytes left over after a frame's fields");
  }

 private:
  void need(std::size_t n) const {
    if (p_.size() - at_ < n) throw ProtocolError("control channel: a frame is truncated");
  }
  std::string_view p_;
  std::size_t at_ = 0;
};

}  // namespace

std::string encode(const Message& msg) {
  Writer w;
  return std::visit(
      [&w](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Elastic>) {
          w.i32(m.generation);
          return w.frame(Type::elastic);
        } else if constexpr (std::is_same_v<T, Left>) {
          w.i32(m.generation);
          return w.frame(Type::left);
        } else if constexpr (std::is_same_v<T, EndGeneration>) {
          w.i32(m.generation);
          w.str(m.reason);
          return w.frame(Type::end_generation);
        } else {
          for (std::int32_t v : {m.generation, m.rank, m.size, m.local_rank, m.local_size,
                                 m.cross_rank, m.cross_size})
            w.i32(v);
          w.str(m.rendezvous_addr);
          w.u32(m.rendezvous_port);
          w.str(m.secret);
          for (bool b : {m.hosts_added, m.hosts_removed, m.failure}) w.u8(b ? 1 : 0);
          return w.frame(Type::placement);
        }
      },
      msg);
}

std::optional<Message> Decoder::next() {
  if (buf_.size() < 4) return std::nullopt;
  const std::uint32_t len = Reader(std::string_view(buf_).substr(0, 4)).u32();
  if (len == 0 || len > kMaxFrameBytes)
    throw ProtocolError("control channel: a frame of " + std::to_string(len) + " bytes (at most " +
                        std::to_string(kMaxFrameBytes) + ", at least 1)");
  if (buf_.size() - 4 < len) return std::nullopt;
  Reader r(std::string_view(buf_).substr(5, len - 1));
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
      m.hosts_added = r.flag();
      m.hosts_removed = r.flag();
      m.failure = r.flag();
      out = std::move(m);
      break;
    }
    default:
      throw ProtocolError("control channel: unknown frame type " + std::to_string(type));
  }
  r.end();
  buf_.erase(0, 4 + static_cast<std::size_t>(len));
  return out;
}

}  // namespace hvdrun::control
