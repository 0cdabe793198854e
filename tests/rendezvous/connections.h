// What the rendezvous server tests use to reach the server under test: client options
// for it, and a raw TCP connection to speak (or not speak) the protocol by hand.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "common/fd.h"
#include "rendezvous/client.h"
#include "rendezvous/server.h"

namespace hvdrun::rendezvous::testing {

/// Options of a client of `s` on loopback with `secret`, connecting within
/// `connect_timeout`, each call within 5 s.
inline ClientOptions opts(const Server& s, const std::string& secret,
                          std::chrono::milliseconds connect_timeout = std::chrono::seconds(2)) {
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = s.port();
  o.secret = secret;
  o.connect_timeout = connect_timeout;
  o.call_timeout = std::chrono::seconds(5);
  return o;
}

/// A plain TCP connection to 127.0.0.1:`port` (the test fails if it cannot connect).
inline UniqueFd raw_connect(std::uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

}  // namespace hvdrun::rendezvous::testing
