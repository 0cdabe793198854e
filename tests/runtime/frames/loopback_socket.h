// Sockets the frame mesh's tests stand between ranks with (a relay, a fake acceptor): the
// IPv4 address a rank published, and a listener on 127.0.0.9, an address no rank uses.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <string>

#include "common/fd.h"

namespace hvdrun::testing {

/// The IPv4 address `host`:`port` resolves to.
inline sockaddr_in resolve_v4(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  REQUIRE(::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) == 0);
  const sockaddr_in out = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  return out;
}

/// A socket listening on 127.0.0.9 (a free port, `backlog` pending); `port` gets the port.
inline UniqueFd listen_on_127_0_0_9(int backlog, int& port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in me{};
  me.sin_family = AF_INET;
  me.sin_addr.s_addr = htonl(0x7f000009);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&me), sizeof(me)) == 0);
  REQUIRE(::listen(fd.get(), backlog) == 0);
  socklen_t len = sizeof(me);
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &len) == 0);
  port = ntohs(me.sin_port);
  return fd;
}

}  // namespace hvdrun::testing
