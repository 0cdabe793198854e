// local_peer_uid: the uid behind a loopback connection, for IPv4 and IPv6, with the
// client running as another user (nobody) for real.
#include "common/socket_owner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "common/fd.h"

using hvdrun::UniqueFd;

namespace {

struct Listener {
  UniqueFd fd;
  sockaddr_storage addr{};
  socklen_t len = 0;
};

Listener listen_on(int family) {
  Listener l;
  l.fd = UniqueFd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(l.fd);
  if (family == AF_INET) {
    auto& sin = reinterpret_cast<sockaddr_in&>(l.addr);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    l.len = sizeof sin;
  } else {
    auto& sin6 = reinterpret_cast<sockaddr_in6&>(l.addr);
    sin6.sin6_family = AF_INET6;
    sin6.sin6_addr = in6addr_loopback;
    l.len = sizeof sin6;
  }
  REQUIRE(::bind(l.fd.get(), reinterpret_cast<sockaddr*>(&l.addr), l.len) == 0);
  REQUIRE(::listen(l.fd.get(), 8) == 0);
  REQUIRE(::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&l.addr), &l.len) == 0);
  return l;
}

// Connects to `l` from a child running as `uid`; returns the accepted socket. The child
// holds its end until `hold` reaches EOF.
UniqueFd connect_as(const Listener& l, uid_t uid, pid_t& child, UniqueFd& hold) {
  auto [r, w] = hvdrun::make_pipe();
  child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    w.reset();
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    int c = ::socket(l.addr.ss_family, SOCK_STREAM, 0);
    if (c < 0 || ::connect(c, reinterpret_cast<const sockaddr*>(&l.addr), l.len) != 0) ::_exit(2);
    char b;
    while (::read(r.get(), &b, 1) > 0) {
    }
    ::_exit(0);
  }
  r.reset();
  hold = std::move(w);
  UniqueFd s(::accept4(l.fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  REQUIRE(s);
  return s;
}

}  // namespace

TEST_CASE("local_peer_uid names the user behind a loopback connection", "[common][security]") {
  const passwd* nobody = ::getpwnam("nobody");
  REQUIRE(nobody != nullptr);
  const int family = GENERATE(AF_INET, AF_INET6);
  INFO((family == AF_INET ? "IPv4" : "IPv6"));
  Listener l = listen_on(family);
  for (uid_t uid : {::geteuid(), nobody->pw_uid}) {
    if (uid != 0 && ::geteuid() != 0) continue;  // needs root to become nobody
    pid_t child = -1;
    UniqueFd hold;
    UniqueFd s = connect_as(l, uid, child, hold);
    auto owner = hvdrun::local_peer_uid(s.get());
    REQUIRE(owner.has_value());
    CHECK(*owner == uid);
    CHECK(hvdrun::local_peer_owner(s.get()).kind == hvdrun::PeerKind::local);
    hold.reset();
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("local_peer_uid of something that is not a connected socket is nothing",
          "[common][security]") {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  CHECK_FALSE(hvdrun::local_peer_uid(s.get()).has_value());
  CHECK_FALSE(hvdrun::local_peer_uid(-1).has_value());
  // Neither local nor remote: the Horovod rendezvous answers such a caller 503, not 403.
  CHECK(hvdrun::local_peer_owner(s.get()).kind == hvdrun::PeerKind::unknown);
}
