// local_peer_uid: look the peer's socket up by (address, port) pair, through sock_diag
// (one exact lookup in the kernel's hash) or, where that is missing, /proc/net/tcp{,6}.
#include "common/socket_owner.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/fd.h"

namespace hvdrun {
namespace {

// One end of a connection as the kernel's tables show it.
struct End {
  int family = AF_INET;
  std::array<std::uint32_t, 4> addr{};  // network byte order, IPv4 in [0]
  std::uint16_t port = 0;               // host byte order
};

// An IPv4-mapped IPv6 end (::ffff:a.b.c.d) as the IPv4 end it stands for.
End unmapped(const End& e) {
  if (e.family != AF_INET6 || e.addr[0] != 0 || e.addr[1] != 0 || e.addr[2] != htonl(0xffff))
    return e;
  End v4;
  v4.addr[0] = e.addr[3];
  v4.port = e.port;
  return v4;
}

bool end_of(const sockaddr_storage& ss, End& out) {
  if (ss.ss_family == AF_INET) {
    const auto& sin = reinterpret_cast<const sockaddr_in&>(ss);
    out.family = AF_INET;
    out.addr = {sin.sin_addr.s_addr, 0, 0, 0};
    out.port = ntohs(sin.sin_port);
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& sin6 = reinterpret_cast<const sockaddr_in6&>(ss);
    out.family = AF_INET6;
    std::memcpy(out.addr.data(), &sin6.sin6_addr, 16);
    out.port = ntohs(sin6.sin6_port);
    return true;
  }
  return false;
}

enum class Lookup { found, absent, unavailable };

// Asks sock_diag for the socket whose local end is `peer` and remote end `self`.
Lookup diag_lookup(const End& peer, const End& self, uid_t& uid) {
  UniqueFd nl(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl) return Lookup::unavailable;
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<std::uint8_t>(peer.family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  msg.req.id.idiag_sport = htons(peer.port);
  msg.req.id.idiag_dport = htons(self.port);
  std::memcpy(msg.req.id.idiag_src, peer.addr.data(), 16);
  std::memcpy(msg.req.id.idiag_dst, self.addr.data(), 16);
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.get(), &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) <
      0)
    return Lookup::unavailable;
  alignas(nlmsghdr) char buf[4096];
  timeval tv{1, 0};
  ::setsockopt(nl.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const ssize_t n = ::recv(nl.get(), buf, sizeof buf, 0);
  if (n < static_cast<ssize_t>(sizeof(nlmsghdr))) return Lookup::unavailable;
  const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<unsigned>(n))) return Lookup::unavailable;
  if (h->nlmsg_type == NLMSG_ERROR) {
    const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
    // ENOENT: no such socket, or no tcp_diag module; the caller tells them apart.
    return err->error == -ENOENT ? Lookup::absent : Lookup::unavailable;
  }
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
    return Lookup::unavailable;
  const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
  // The lookup falls back to a listener on the peer's port: only the connection counts.
  if (d->idiag_state == TCP_LISTEN || ntohs(d->id.idiag_dport) != self.port) return Lookup::absent;
  uid = d->idiag_uid;
  return Lookup::found;
}

// "0100007F:1F90"-style text of an end as /proc/net/tcp (family AF_INET) or tcp6 prints it.
std::string proc_text(const End& e) {
  char out[64];
  if (e.family == AF_INET) {
    std::snprintf(out, sizeof out, "%08X:%04X", e.addr[0], e.port);
  } else {
    std::snprintf(out, sizeof out, "%08X%08X%08X%08X:%04X", e.addr[0], e.addr[1], e.addr[2],
                  e.addr[3], e.port);
  }
  return out;
}

// Scans /proc/net/tcp or tcp6 for the row with local end `peer` and remote end `self`.
Lookup proc_lookup(const End& peer, const End& self, uid_t& uid) {
  std::ifstream f(peer.family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6");
  if (!f) return Lookup::unavailable;  // out of descriptors, or no /proc
  const std::string local = proc_text(peer), remote = proc_text(self);
  std::string line;
  std::getline(f, line);  // the header
  while (std::getline(f, line)) {
    std::istringstream row(line);
    std::string sl, l, r, st, queues, timer, retr;
    unsigned long owner = 0;
    if (!(row >> sl >> l >> r >> st >> queues >> timer >> retr >> owner)) continue;
    if (l == local && r == remote && st != "0A") {
      uid = static_cast<uid_t>(owner);
      return Lookup::found;
    }
  }
  return Lookup::absent;
}

// An IPv4 end as a dual-stack AF_INET6 socket holds it: ::ffff:a.b.c.d.
End mapped(const End& e) {
  End m;
  m.family = AF_INET6;
  m.addr = {0, 0, htonl(0xffff), e.addr[0]};
  m.port = e.port;
  return m;
}

// sock_diag for the socket with local end `a` and remote end `b`, in the IPv4 form and,
// for IPv4, in the dual-stack form too.
Lookup diag_either(const End& a, const End& b, uid_t& uid) {
  Lookup r = diag_lookup(a, b, uid);
  if (r == Lookup::found || a.family != AF_INET) return r;
  Lookup m = diag_lookup(mapped(a), mapped(b), uid);
  return m == Lookup::unavailable ? r : m;
}

Lookup proc_either(const End& a, const End& b, uid_t& uid) {
  Lookup r = proc_lookup(a, b, uid);
  if (r != Lookup::absent || a.family != AF_INET) return r;
  return proc_lookup(mapped(a), mapped(b), uid);
}

PeerOwner lookup(const End& peer, const End& self) {
  uid_t uid = 0;
  if (diag_either(peer, self, uid) == Lookup::found) return {PeerKind::local, uid};
  // The kernel also answers ENOENT when it has no tcp_diag: asking for this server's own
  // end of the connection, which exists, tells a remote peer from a missing module.
  uid_t mine = 0;
  if (diag_either(self, peer, mine) == Lookup::found) return {PeerKind::remote, 0};
  switch (proc_either(peer, self, uid)) {
    case Lookup::found:
      return {PeerKind::local, uid};
    case Lookup::absent:
      return {PeerKind::remote, 0};
    case Lookup::unavailable:
      break;
  }
  return {PeerKind::unknown, 0};
}

}  // namespace

PeerOwner local_peer_owner(int fd) noexcept {
  try {
    sockaddr_storage p{}, s{};
    socklen_t pl = sizeof p, sl = sizeof s;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&p), &pl) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&s), &sl) != 0)
      return {PeerKind::unknown, 0};
    End peer, self;
    if (!end_of(p, peer) || !end_of(s, self)) return {PeerKind::unknown, 0};
    peer = unmapped(peer);
    self = unmapped(self);
    if (peer.family != self.family) return {PeerKind::unknown, 0};
    return lookup(peer, self);
  } catch (...) {
  }
  return {PeerKind::unknown, 0};
}

std::optional<uid_t> local_peer_uid(int fd) noexcept {
  const PeerOwner o = local_peer_owner(fd);
  if (o.kind != PeerKind::local) return std::nullopt;
  return o.uid;
}

}  // namespace hvdrun
