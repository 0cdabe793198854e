// Encoding and decoding of agent protocol frames (see agent_protocol.h for the format).
#include "launcher/agent/agent_protocol.h"

#include <cctype>
#include <cstring>

#include "common/wire.h"

namespace hvdrun::launcher::proto {
namespace {

using wire::get_u32;
using wire::put_u32;

// Builds one payload (wire::Writer with the frame limit); the frame header is added by
// finish().
class Writer {
 public:
  void u8(std::uint8_t v) { w_.u8(v); }
  void u16(std::uint16_t v) { w_.u16(v); }
  void u32(std::uint32_t v) { w_.u32(v); }
  void i32(std::int32_t v) { w_.i32(v); }
  void str(std::string_view v) {
    check(v.size());
    w_.str(v);
  }
  void strs(const std::vector<std::string>& v) {
    u32(static_cast<std::uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  void finish(Type type, ByteQueue& out) {
    check(w_.size() + 1);
    char head[5];
    put_u32(head, static_cast<std::uint32_t>(w_.size() + 1));
    head[4] = static_cast<char>(type);
    out.append(head, 5);
    out.append(w_.bytes());
  }

 private:
  void check(std::size_t more) const {
    if (w_.size() + more >= kMaxFrameBytes) {
      throw ProtocolError("agent protocol: message larger than the " +
                          std::to_string(kMaxFrameBytes) +
                          "-byte frame limit (is the environment or command line that big?)");
    }
  }
  wire::Writer w_;
};

// A malformed payload of a `what` frame, in the agent protocol's words.
struct Malformed {
  const char* what;
  [[noreturn]] void operator()(wire::Problem problem, std::size_t n) const {
    fail(problem == wire::Problem::trailing ? std::to_string(n) + " unexpected trailing bytes"
                                            : std::string("truncated"));
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw ProtocolError(std::string("agent protocol: bad ") + what + " frame: " + why);
  }
};

// Reads one payload (wire::Reader); strings and lists are checked against the frame.
class Reader {
 public:
  Reader(std::string_view p, const char* what) : r_(p, Malformed{what}), malformed_{what} {}
  std::uint8_t u8() { return r_.u8(); }
  std::uint16_t u16() { return r_.u16(); }
  std::uint32_t u32() { return r_.u32(); }
  std::int32_t i32() { return r_.i32(); }
  std::string_view view() {
    const std::uint32_t n = r_.length();
    if (n > r_.left()) fail("string of " + std::to_string(n) + " bytes overruns the frame");
    return r_.view(n);
  }
  std::string str() { return std::string(view()); }
  std::vector<std::string> strs() {
    std::uint32_t n = u32();
    // Each item needs at least its 4-byte length: a count beyond that is garbage.
    if (n > r_.left() / 4) fail("list of " + std::to_string(n) + " items overruns the frame");
    std::vector<std::string> v;
    v.reserve(n);
    for (std::uint32_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }
  std::size_t left() const { return r_.left(); }
  void done() { r_.done(); }
  [[noreturn]] void fail(const std::string& why) const { malformed_.fail(why); }

 private:
  wire::Reader<Malformed> r_;
  Malformed malformed_;
};

const char* name_of(Type t) {
  switch (t) {
    case Type::hello:
      return "hello";
    case Type::agent_hello:
      return "agent-hello";
    case Type::spawn:
      return "spawn";
    case Type::rank_started:
      return "rank-started";
    case Type::output:
      return "output";
    case Type::rank_exited:
      return "rank-exited";
    case Type::kill:
      return "kill";
    case Type::heartbeat:
      return "heartbeat";
    case Type::fatal:
      return "fatal";
    case Type::suspend:
      return "suspend";
    case Type::resume:
      return "resume";
    case Type::rank_stopped:
      return "rank-stopped";
    case Type::rank_elastic:
      return "rank-elastic";
    case Type::regenerate:
      return "regenerate";
    case Type::rank_left:
      return "rank-left";
    case Type::signal:
      return "signal";
    case Type::job_end:
      return "job-end";
    case Type::stacks_request:
      return "stacks-request";
    case Type::stacks:
      return "stacks";
  }
  return "unknown";
}

// Shows the first bytes of a stream that is not ours, for the error message.
std::string printable_prefix(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 32)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isprint(u)) {
      out.push_back(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    }
  }
  return out;
}

void check_magic(Reader& r) {
  std::uint32_t magic = r.u32();
  if (magic != kMagic) r.fail("wrong magic number (not an hvdrun agent stream)");
}

Hello decode_hello(Reader& r) {
  check_magic(r);
  Hello m;
  m.version = r.u32();
  if (m.version != kVersion) return m;  // the caller reports the mismatch
  m.heartbeat_interval_ms = r.u32();
  m.heartbeat_timeout_ms = r.u32();
  m.kill_grace_ms = r.u32();
  m.log_level = r.str();
  m.launcher_addr = r.str();
  m.job_id = r.str();
  m.network_interface = r.str();
  m.want_topology = r.u8() != 0;
  r.done();
  return m;
}

AgentHello decode_agent_hello(Reader& r) {
  check_magic(r);
  AgentHello m;
  m.version = r.u32();
  if (m.version != kVersion) return m;
  m.pid = r.u32();
  m.hostname = r.str();
  m.free_port = r.u16();
  m.iface = r.str();
  m.iface_addrs = r.strs();
  m.topology = r.str();
  r.done();
  return m;
}

Spawn decode_spawn(Reader& r) {
  Spawn m;
  m.rank = r.i32();
  m.argv = r.strs();
  m.cwd = r.str();
  m.host_env = r.strs();
  m.env = r.strs();
  m.env_defaults = r.strs();
  m.stderr_tail_lines = r.u32();
  const std::uint8_t control = r.u8();
  if (control > 1) r.fail("control flag " + std::to_string(control));
  m.control = control == 1;
  r.done();
  if (m.rank < 0) r.fail("negative rank");
  if (m.argv.empty()) r.fail("empty argv");
  return m;
}

Output decode_output(Reader& r) {
  Output m;
  m.rank = r.i32();
  std::uint8_t s = r.u8();
  if (s != 1 && s != 2) r.fail("stream " + std::to_string(s) + " is neither 1 nor 2");
  m.stream = static_cast<Stream>(s);
  m.data = r.view();
  r.done();
  return m;
}

RankExited decode_rank_exited(Reader& r) {
  RankExited m;
  m.rank = r.i32();
  std::uint8_t how = r.u8();
  if (how > 1) r.fail("exit kind " + std::to_string(how));
  m.signaled = how == 1;
  m.value = r.i32();
  m.stderr_tail = r.strs();
  m.traceback = r.str();
  r.done();
  return m;
}

Regenerate decode_regenerate(Reader& r) {
  Regenerate m;
  m.generation = r.i32();
  m.reason = r.str();
  const std::uint8_t flags = r.u8();
  if (flags > 7) r.fail("flags " + std::to_string(flags));
  m.failure = (flags & 1) != 0;
  m.hosts_added = (flags & 2) != 0;
  m.hosts_removed = (flags & 4) != 0;
  m.size = r.i32();
  m.rendezvous_addr = r.str();
  m.rendezvous_port = r.u16();
  m.secret = r.str();
  const std::uint32_t n = r.u32();
  constexpr std::size_t kPlacementBytes = 6 * 4;
  if (n > r.left() / kPlacementBytes)
    r.fail("list of " + std::to_string(n) + " placements overruns the frame");
  m.ranks.resize(n);
  for (auto& p : m.ranks)
    for (std::int32_t* v :
         {&p.old_rank, &p.rank, &p.local_rank, &p.local_size, &p.cross_rank, &p.cross_size})
      *v = r.i32();
  r.done();
  return m;
}

Stacks decode_stacks(Reader& r) {
  Stacks m;
  m.id = r.u32();
  const std::uint32_t n = r.u32();
  constexpr std::size_t kLeast = 4 + 1 + 4;  // rank, status, empty text
  if (n > r.left() / kLeast) r.fail("list of " + std::to_string(n) + " ranks overruns the frame");
  m.ranks.resize(n);
  for (auto& rs : m.ranks) {
    rs.rank = r.i32();
    const std::uint8_t status = r.u8();
    if (status > 2) r.fail("stack status " + std::to_string(status));
    rs.status = static_cast<StackStatus>(status);
    rs.text = r.str();
  }
  r.done();
  return m;
}

Message decode_payload(Type type, std::string_view payload) {
  Reader r(payload, name_of(type));
  switch (type) {
    case Type::hello:
      return decode_hello(r);
    case Type::agent_hello:
      return decode_agent_hello(r);
    case Type::spawn:
      return decode_spawn(r);
    case Type::rank_started: {
      RankStarted m;
      m.rank = r.i32();
      m.pid = r.i32();
      r.done();
      return m;
    }
    case Type::output:
      return decode_output(r);
    case Type::rank_exited:
      return decode_rank_exited(r);
    case Type::kill: {
      Kill m;
      m.grace_ms = r.u32();
      r.done();
      return m;
    }
    case Type::heartbeat:
      r.done();
      return Heartbeat{};
    case Type::suspend:
      r.done();
      return Suspend{};
    case Type::resume:
      r.done();
      return Resume{};
    case Type::rank_stopped: {
      RankStopped m;
      m.rank = r.i32();
      m.signal = r.i32();
      r.done();
      return m;
    }
    case Type::rank_elastic: {
      RankElastic m;
      m.rank = r.i32();
      m.generation = r.i32();
      r.done();
      return m;
    }
    case Type::rank_left: {
      RankLeft m;
      m.rank = r.i32();
      m.generation = r.i32();
      r.done();
      return m;
    }
    case Type::signal: {
      Signal m;
      m.signo = r.i32();
      r.done();
      return m;
    }
    case Type::job_end: {
      JobEnd m;
      m.exit_code = r.i32();
      m.message = r.str();
      m.this_host = r.u8() != 0;
      r.done();
      return m;
    }
    case Type::stacks_request: {
      StacksRequest m;
      m.id = r.u32();
      m.wait_ms = r.u32();
      r.done();
      return m;
    }
    case Type::stacks:
      return decode_stacks(r);
    case Type::regenerate:
      return decode_regenerate(r);
    case Type::fatal: {
      Fatal m;
      m.rank = r.i32();
      m.message = r.str();
      r.done();
      return m;
    }
  }
  throw ProtocolError("agent protocol: unknown frame type " +
                      std::to_string(static_cast<int>(type)));
}

struct EncodeVisitor {
  ByteQueue& out;
  void operator()(const Hello& m) {
    Writer w;
    w.u32(kMagic);
    w.u32(m.version);
    w.u32(m.heartbeat_interval_ms);
    w.u32(m.heartbeat_timeout_ms);
    w.u32(m.kill_grace_ms);
    w.str(m.log_level);
    w.str(m.launcher_addr);
    w.str(m.job_id);
    w.str(m.network_interface);
    w.u8(m.want_topology ? 1 : 0);
    w.finish(Type::hello, out);
  }
  void operator()(const AgentHello& m) {
    Writer w;
    w.u32(kMagic);
    w.u32(m.version);
    w.u32(m.pid);
    w.str(m.hostname);
    w.u16(m.free_port);
    w.str(m.iface);
    w.strs(m.iface_addrs);
    w.str(m.topology);
    w.finish(Type::agent_hello, out);
  }
  void operator()(const Spawn& m) {
    Writer w;
    w.i32(m.rank);
    w.strs(m.argv);
    w.str(m.cwd);
    w.strs(m.host_env);
    w.strs(m.env);
    w.strs(m.env_defaults);
    w.u32(m.stderr_tail_lines);
    w.u8(m.control ? 1 : 0);
    w.finish(Type::spawn, out);
  }
  void operator()(const RankStarted& m) {
    Writer w;
    w.i32(m.rank);
    w.i32(m.pid);
    w.finish(Type::rank_started, out);
  }
  void operator()(const Output& m) {
    if (m.data.size() > kMaxFrameBytes - kOutputHeaderBytes) {
      throw ProtocolError("agent protocol: output chunk too large");
    }
    char* p = out.prepare(kOutputHeaderBytes + m.data.size());
    write_output_header(p, m.rank, m.stream, static_cast<std::uint32_t>(m.data.size()));
    if (!m.data.empty()) std::memcpy(p + kOutputHeaderBytes, m.data.data(), m.data.size());
    out.commit(kOutputHeaderBytes + m.data.size());
  }
  void operator()(const RankExited& m) {
    Writer w;
    w.i32(m.rank);
    w.u8(m.signaled ? 1 : 0);
    w.i32(m.value);
    w.strs(m.stderr_tail);
    w.str(m.traceback);
    w.finish(Type::rank_exited, out);
  }
  void operator()(const Kill& m) {
    Writer w;
    w.u32(m.grace_ms);
    w.finish(Type::kill, out);
  }
  void operator()(const Heartbeat&) { Writer().finish(Type::heartbeat, out); }
  void operator()(const Suspend&) { Writer().finish(Type::suspend, out); }
  void operator()(const Resume&) { Writer().finish(Type::resume, out); }
  void operator()(const RankStopped& m) {
    Writer w;
    w.i32(m.rank);
    w.i32(m.signal);
    w.finish(Type::rank_stopped, out);
  }
  void operator()(const RankElastic& m) {
    Writer w;
    w.i32(m.rank);
    w.i32(m.generation);
    w.finish(Type::rank_elastic, out);
  }
  void operator()(const RankLeft& m) {
    Writer w;
    w.i32(m.rank);
    w.i32(m.generation);
    w.finish(Type::rank_left, out);
  }
  void operator()(const Signal& m) {
    Writer w;
    w.i32(m.signo);
    w.finish(Type::signal, out);
  }
  void operator()(const StacksRequest& m) {
    Writer w;
    w.u32(m.id);
    w.u32(m.wait_ms);
    w.finish(Type::stacks_request, out);
  }
  void operator()(const Stacks& m) {
    Writer w;
    w.u32(m.id);
    w.u32(static_cast<std::uint32_t>(m.ranks.size()));
    for (const auto& rs : m.ranks) {
      w.i32(rs.rank);
      w.u8(static_cast<std::uint8_t>(rs.status));
      w.str(rs.text);
    }
    w.finish(Type::stacks, out);
  }
  void operator()(const Regenerate& m) {
    Writer w;
    w.i32(m.generation);
    w.str(m.reason);
    w.u8(static_cast<std::uint8_t>((m.failure ? 1 : 0) | (m.hosts_added ? 2 : 0) |
                                   (m.hosts_removed ? 4 : 0)));
    w.i32(m.size);
    w.str(m.rendezvous_addr);
    w.u16(m.rendezvous_port);
    w.str(m.secret);
    w.u32(static_cast<std::uint32_t>(m.ranks.size()));
    for (const auto& p : m.ranks)
      for (std::int32_t v :
           {p.old_rank, p.rank, p.local_rank, p.local_size, p.cross_rank, p.cross_size})
        w.i32(v);
    w.finish(Type::regenerate, out);
  }
  void operator()(const JobEnd& m) {
    Writer w;
    w.i32(m.exit_code);
    w.str(m.message);
    w.u8(m.this_host ? 1 : 0);
    w.finish(Type::job_end, out);
  }
  void operator()(const Fatal& m) {
    Writer w;
    w.i32(m.rank);
    w.str(m.message);
    w.finish(Type::fatal, out);
  }
};

}  // namespace

void encode(const Message& msg, ByteQueue& out) { std::visit(EncodeVisitor{out}, msg); }

void write_output_header(char* dst, std::int32_t rank, Stream stream, std::uint32_t size) {
  put_u32(dst, size + 10);  // type + rank + stream + data length + data
  dst[4] = static_cast<char>(Type::output);
  put_u32(dst + 5, static_cast<std::uint32_t>(rank));
  dst[9] = static_cast<char>(stream);
  put_u32(dst + 10, size);
}

std::optional<Message> Decoder::next() {
  // The previous message's payload (an output view may point into it) is released now.
  buf_.consume(pending_consume_);
  pending_consume_ = 0;
  if (buf_.size() < 4) return std::nullopt;
  std::uint32_t len = get_u32(buf_.data());
  if (len == 0 || len > kMaxFrameBytes) {
    std::string msg =
        "agent protocol: frame length " + std::to_string(len) +
        (len == 0 ? " is empty"
                  : " exceeds the limit of " + std::to_string(kMaxFrameBytes) + " bytes");
    if (first_) {
      msg += "; the stream starts with '" + printable_prefix(buf_.view()) +
             "', which is not an hvdrun agent (does a login script print to stdout?)";
    }
    throw ProtocolError(msg);
  }
  if (buf_.size() < 4 + static_cast<std::size_t>(len)) return std::nullopt;
  auto type = static_cast<Type>(static_cast<unsigned char>(buf_.data()[4]));
  std::string_view payload(buf_.data() + 5, len - 1);
  if (first_ && type != Type::hello && type != Type::agent_hello && type != Type::fatal &&
      type != Type::job_end) {
    throw ProtocolError("agent protocol: stream starts with '" + printable_prefix(buf_.view()) +
                        "' instead of a hello frame (does a login script print to stdout?)");
  }
  Message m = decode_payload(type, payload);
  first_ = false;
  pending_consume_ = 4 + static_cast<std::size_t>(len);
  return m;
}

const char* type_name(const Message& msg) {
  static constexpr Type kTypes[] = {
      Type::hello,        Type::agent_hello,    Type::spawn,     Type::rank_started,
      Type::output,       Type::rank_exited,    Type::kill,      Type::heartbeat,
      Type::fatal,        Type::suspend,        Type::resume,    Type::rank_stopped,
      Type::rank_elastic, Type::regenerate,     Type::rank_left, Type::signal,
      Type::job_end,      Type::stacks_request, Type::stacks};
  return name_of(kTypes[msg.index()]);
}

}  // namespace hvdrun::launcher::proto
