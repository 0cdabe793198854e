// Issue #14 against the rendezvous server in-process, over real loopback sockets: a flood
// of connections that never authenticate cannot keep a client with the secret out, a
// frame header alone allocates nothing, wrong-secret handshakes log one line per
// interval with a count, and the store keeps to its budget.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/fd.h"
#include "common/fd_limit.h"
#include "rendezvous/client.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"
#include "tests/rendezvous/connections.h"
#include "tests/support/captured_log.h"
#include "tests/support/processes.h"

using namespace hvdrun::rendezvous;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using hvdrun::rendezvous::testing::raw_connect;
using hvdrun::testing::CapturedLog;

namespace {

ClientOptions opts(const Server& s, const std::string& secret) {
  return hvdrun::rendezvous::testing::opts(s, secret, 5s);
}

void read_exact(int fd, char* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    auto r = ::recv(fd, out + got, n - got, 0);
    REQUIRE(r > 0);
    got += static_cast<std::size_t>(r);
  }
}

std::string read_frame(int fd) {
  char hdr[4];
  read_exact(fd, hdr, 4);
  std::string body(get_u32(hdr), '\0');
  read_exact(fd, body.data(), body.size());
  return body;
}

void send_all(int fd, const std::string& s) {
  REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size()));
}

// Completes the handshake over a raw socket with `secret`; true when the server accepted.
bool handshake(int fd, const std::string& secret) {
  Hmac key(secret);
  auto greeting = read_frame(fd);
  auto server_nonce = greeting.substr(kGreeting.size());
  auto client_nonce = random_bytes(kMacBytes);
  send_all(fd,
           plain_frame(client_nonce + Handshake::client_proof(key, server_nonce, client_nonce)));
  auto answer = read_frame(fd);
  return !answer.empty() && answer[0] == '\0';
}

long rss_kib() { return hvdrun::testing::rss_kib(::getpid()); }

}  // namespace

TEST_CASE("rendezvous: 2,000 connections that never authenticate do not keep a rank out",
          "[rendezvous][fault][security]") {
  hvdrun::raise_fd_limit();  // the flood's 2,000 client ends live in this process too
  auto secret = generate_secret();
  ServerOptions so;
  so.unauthenticated = {128, 32};
  Server srv(secret, "127.0.0.1", 0, so);
  srv.start();
  std::vector<hvdrun::UniqueFd> flood;
  for (int i = 0; i < 2000; ++i) flood.push_back(raw_connect(srv.port()));
  // A rank with the secret gets in at once, while the flood is held open.
  auto t0 = Clock::now();
  Client c(opts(srv, secret));
  c.set("k", "v");
  CHECK(c.get("k") == "v");
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  CHECK(ms < 3s);
  auto st = srv.stats();
  CHECK(st.unauthenticated <= 32);  // one source: its share
  CHECK(st.evicted >= 2000 - 32);
  // The launcher's descriptors stay within the cap (plus the rank's).
  CHECK(srv.connection_count() <= 32 + 1);
  std::printf(
      "rendezvous-flood: 2000 silent connections, rank in after %lld ms, %zu held, "
      "%llu evicted\n",
      static_cast<long long>(ms.count()), st.unauthenticated,
      static_cast<unsigned long long>(st.evicted));
}

TEST_CASE("rendezvous: frame headers alone allocate nothing, buffers grow with the bytes sent",
          "[rendezvous][fault][security]") {
  auto secret = generate_secret();
  Server srv(secret, "127.0.0.1", 0);
  srv.start();
  const long before = rss_kib();
  std::vector<hvdrun::UniqueFd> conns;
  for (int i = 0; i < 40; ++i) {
    conns.push_back(raw_connect(srv.port()));
    REQUIRE(handshake(conns.back().get(), secret));
    // A header announcing the largest frame, and 1 KiB of its body.
    std::string hdr(4, '\0');
    put_u32(hdr.data(), kMaxFrameBytes);
    send_all(conns.back().get(), hdr + std::string(1024, 'x'));
  }
  // Wait until the server has read everything sent: handshakes, headers and bodies.
  const std::uint64_t sent = 40u * (2 * kMacBytes + 4 + 4 + 1024);
  ServerStats st;
  auto deadline = Clock::now() + 5s;
  do {
    st = srv.stats();
  } while (st.received_bytes < sent && Clock::now() < deadline);
  REQUIRE(st.received_bytes == sent);
  REQUIRE(srv.connection_count() == 40);
  const long grown_kib = rss_kib() - before;
  // Before: 16 MiB per connection from the header alone (640 MiB). Now a read chunk each.
  CHECK(st.buffer_bytes <= 40u * 64 * 1024);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  CHECK(grown_kib < 64 * 1024);  // sanitizers quarantine freed memory: the count above says it
#endif
  std::printf("rendezvous-headers: 40 headers of 16 MiB: buffers %zu KiB, RSS +%ld KiB\n",
              st.buffer_bytes / 1024, grown_kib);
  // A frame that does arrive whole is still accepted at full size.
  Client c(opts(srv, secret));
  std::string big(8u << 20, 'b');
  c.set("big", big);
  CHECK(c.get("big") == big);
}

TEST_CASE("rendezvous: wrong-secret handshakes log one line per interval, with a count",
          "[rendezvous][fault][security]") {
  CapturedLog log;
  auto secret = generate_secret();
  ServerOptions so;
  so.log_interval = 1500ms;
  Server srv(secret, "127.0.0.1", 0, so);
  srv.start();
  auto wrong = generate_secret();
  auto t0 = Clock::now();
  int rejected = 0;
  while (rejected < 300) {
    auto fd = raw_connect(srv.port());
    CHECK_FALSE(handshake(fd.get(), wrong));
    ++rejected;
  }
  CHECK(Clock::now() - t0 < 1500ms);  // all inside one interval (far quicker here)
  CHECK(log.lines_with("wrong job secret") == 1);
  // After the interval the next one is written with the count held back.
  std::this_thread::sleep_for(1600ms);  // the interval itself is what is tested
  auto fd = raw_connect(srv.port());
  CHECK_FALSE(handshake(fd.get(), wrong));
  auto deadline = Clock::now() + 5s;
  while (log.lines_with("wrong job secret") < 2 && Clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  INFO(log.text());
  CHECK(log.lines_with("wrong job secret") == 2);
  CHECK_THAT(log.text(),
             Catch::Contains("wrong job secret (and 299 more like it in the last 1 s)"));
  CHECK(srv.stats().rejected == 301);
}

TEST_CASE("rendezvous: the store keeps to its budget and says so", "[rendezvous][security]") {
  auto secret = generate_secret();
  ServerOptions so;
  so.max_store_bytes = 1u << 20;
  Server srv(secret, "127.0.0.1", 0, so);
  srv.start();
  Client c(opts(srv, secret));
  c.set("a", std::string(600u << 10, 'a'));
  try {
    c.set("b", std::string(600u << 10, 'b'));
    FAIL("a set beyond the budget was accepted");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("rendezvous store full") &&
                             Catch::Contains("budget of 1048576 bytes"));
  }
  CHECK_FALSE(c.get("b").has_value());
  CHECK(srv.stats().store_bytes == 1 + (600u << 10) + kStoreEntryOverhead);
  // Replacing a value or deleting a key makes room again.
  c.erase("a");
  c.set("b", std::string(600u << 10, 'b'));
  CHECK(srv.stats().store_bytes == 1 + (600u << 10) + kStoreEntryOverhead);
}
