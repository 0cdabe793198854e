// Integration tests of the rendezvous server and client over real loopback sockets:
// the server runs in-process, clients in threads, hostile clients as raw sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "common/deadline.h"
#include "common/fd.h"
#include "rendezvous/client.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"
#include "tests/rendezvous/connections.h"

using namespace hvdrun::rendezvous;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using hvdrun::rendezvous::testing::opts;
using hvdrun::rendezvous::testing::raw_connect;

namespace {

// Reads until EOF or the deadline; true when the peer closed the connection.
bool closed_by_peer(int fd, std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(hvdrun::ms_left(deadline)) + 1) <= 0) continue;
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0 && errno != EINTR && errno != EAGAIN) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("generate_secret gives 64 fresh hex characters", "[rendezvous]") {
  auto a = generate_secret(), b = generate_secret();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("store operations over a real connection", "[rendezvous][server]") {
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  Client c(opts(s, secret));
  CHECK(c.local_address() == "127.0.0.1");
  CHECK(c.server_address() == "127.0.0.1:" + std::to_string(s.port()));
  CHECK(!c.get("k"));
  c.set("k", "v1");
  CHECK(c.get("k") == "v1");
  c.set("k", std::string(100000, 'z'));
  CHECK(c.get("k")->size() == 100000);
  CHECK(c.add("n", 5) == 5);
  CHECK(c.add("n", -2) == 3);
  CHECK(c.get("n") == "3");
  c.multi_set({{"a", "1"}, {"b", "2"}});
  auto v = c.multi_get({"a", "zz", "b"});
  REQUIRE(v.size() == 3);
  CHECK(v[0] == "1");
  CHECK(!v[1]);
  CHECK(v[2] == "2");
  CHECK(c.erase("a"));
  CHECK(!c.erase("a"));
  CHECK(!c.get("a"));
  c.set("text", "abc");
  CHECK_THROWS_WITH(c.add("text", 1), Catch::Contains("not an integer"));
  c.ping();
  // In-process access sees the same store.
  CHECK(s.get("b") == "2");
  s.set("from-launcher", "x");
  CHECK(c.get("from-launcher") == "x");
  CHECK(s.missing({"b", "nope"}) == std::vector<std::string>{"nope"});
  CHECK(s.connection_count() == 1);
}

TEST_CASE("wait blocks until every key appears", "[rendezvous][server]") {
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  Client waiter(opts(s, secret));
  Client setter(opts(s, secret));
  auto fut = std::async(std::launch::async, [&] { return waiter.wait_for({"x", "y"}, 5s); });
  CHECK(fut.wait_for(100ms) == std::future_status::timeout);
  setter.set("x", "1");
  CHECK(fut.wait_for(50ms) == std::future_status::timeout);
  setter.multi_set({{"y", "2"}});
  REQUIRE(fut.wait_for(3s) == std::future_status::ready);
  CHECK(fut.get().empty());
  // Already present: immediate.
  CHECK(waiter.wait_for({"x"}, 1s).empty());
  // A deleted key is waited for again.
  setter.erase("x");
  auto fut2 = std::async(std::launch::async, [&] { return waiter.wait_for({"x", "y"}, 5s); });
  CHECK(fut2.wait_for(100ms) == std::future_status::timeout);
  setter.add("x", 1);
  REQUIRE(fut2.wait_for(3s) == std::future_status::ready);
  CHECK(fut2.get().empty());
}

TEST_CASE("wait deadline is kept by the server and names the missing keys",
          "[rendezvous][server]") {
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  Client c(opts(s, secret));
  c.set("rank/0", "");
  auto t0 = Clock::now();
  auto missing = c.wait_for({"rank/0", "rank/1", "rank/2"}, 300ms);
  auto took = Clock::now() - t0;
  CHECK(missing == std::vector<std::string>{"rank/1", "rank/2"});
  CHECK(took >= 290ms);
  CHECK(took < 2s);
  try {
    c.wait({"rank/0", "rank/3"}, 100ms, "waiting for ranks");
    FAIL("wait did not time out");
  } catch (const TimeoutError& e) {
    CHECK(e.missing() == std::vector<std::string>{"rank/3"});
    CHECK_THAT(e.what(), Catch::Contains("waiting for ranks") && Catch::Contains("'rank/3'") &&
                             Catch::Contains("127.0.0.1:"));
  }
  // The connection is still usable after a timeout.
  c.set("after", "1");
  CHECK(c.get("after") == "1");
}

TEST_CASE("a client with the wrong secret is rejected", "[rendezvous][server]") {
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  auto o = opts(s, generate_secret());
  CHECK_THROWS_WITH(Client(o), Catch::Contains("rejected") && Catch::Contains("HVDRUN_SECRET"));
  // The right secret still works afterwards.
  Client good(opts(s, secret));
  good.set("k", "v");
  CHECK(good.get("k") == "v");
}

TEST_CASE("garbage, oversized and stalled clients are dropped, others keep working",
          "[rendezvous][server]") {
  auto secret = generate_secret();
  ServerOptions so;
  so.handshake_timeout = 300ms;
  so.frame_timeout = 300ms;
  Server s(secret, "127.0.0.1", 0, so);
  s.start();
  Client good(opts(s, secret));
  good.set("k", "v");

  // A waiting client must survive everything below.
  Client waiter(opts(s, secret));
  auto fut = std::async(std::launch::async, [&] { return waiter.wait_for({"later"}, 10s); });

  SECTION("garbage during the handshake") {
    auto fd = raw_connect(s.port());
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    REQUIRE(::send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL) > 0);
    CHECK(closed_by_peer(fd.get(), 2s));
  }
  SECTION("an oversized length prefix after authentication") {
    // Authenticate by hand, then announce a frame over the cap.
    auto fd = raw_connect(s.port());
    char hdr[4];
    REQUIRE(::recv(fd.get(), hdr, 4, MSG_WAITALL) == 4);
    std::string greet(get_u32(hdr), '\0');
    REQUIRE(::recv(fd.get(), greet.data(), greet.size(), MSG_WAITALL) == (ssize_t)greet.size());
    Hmac h(secret);
    auto sn = greet.substr(kGreeting.size());
    auto cn = random_bytes(32);
    auto msg = plain_frame(cn + Handshake::client_proof(h, sn, cn));
    REQUIRE(::send(fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL) > 0);
    REQUIRE(::recv(fd.get(), hdr, 4, MSG_WAITALL) == 4);
    std::string ans(get_u32(hdr), '\0');
    REQUIRE(::recv(fd.get(), ans.data(), ans.size(), MSG_WAITALL) == (ssize_t)ans.size());
    REQUIRE(ans[0] == '\0');
    char big[4];
    put_u32(big, 0x7fffffff);
    REQUIRE(::send(fd.get(), big, 4, MSG_NOSIGNAL) == 4);
    CHECK(closed_by_peer(fd.get(), 2s));
  }
  SECTION("a frame with a bad MAC after authentication") {
    auto fd = raw_connect(s.port());
    char hdr[4];
    REQUIRE(::recv(fd.get(), hdr, 4, MSG_WAITALL) == 4);
    std::string greet(get_u32(hdr), '\0');
    REQUIRE(::recv(fd.get(), greet.data(), greet.size(), MSG_WAITALL) == (ssize_t)greet.size());
    Hmac h(secret);
    auto sn = greet.substr(kGreeting.size());
    auto cn = random_bytes(32);
    auto msg = plain_frame(cn + Handshake::client_proof(h, sn, cn));
    REQUIRE(::send(fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL) > 0);
    // A frame sealed under a key that is not the session key.
    FrameCodec wrong(random_bytes(32), false);
    Request r;
    r.op = Op::kSet;
    r.keys = {"later"};
    r.values = {"forged"};
    auto f = wrong.seal(encode(r));
    REQUIRE(::send(fd.get(), f.data(), f.size(), MSG_NOSIGNAL) > 0);
    CHECK(closed_by_peer(fd.get(), 2s));
    CHECK(!good.get("later"));
  }
  SECTION("a client that connects and says nothing") {
    auto fd = raw_connect(s.port());
    CHECK(closed_by_peer(fd.get(), 3s));
  }
  SECTION("a client that stalls in the middle of a frame") {
    auto fd = raw_connect(s.port());
    char part[2] = {0, 0};
    REQUIRE(::send(fd.get(), part, 2, MSG_NOSIGNAL) == 2);
    CHECK(closed_by_peer(fd.get(), 3s));
  }
  CHECK(fut.wait_for(0ms) == std::future_status::timeout);
  good.set("later", "ok");
  REQUIRE(fut.wait_for(3s) == std::future_status::ready);
  CHECK(fut.get().empty());
  CHECK(good.get("k") == "v");
}

TEST_CASE("an idle authenticated client is dropped when an idle timeout is set",
          "[rendezvous][server]") {
  auto secret = generate_secret();
  ServerOptions so;
  so.idle_timeout = 200ms;
  Server s(secret, "127.0.0.1", 0, so);
  s.start();
  Client c(opts(s, secret));
  c.set("k", "v");
  // Waiting longer than the idle timeout is not idleness.
  CHECK(c.wait_for({"never"}, 400ms) == std::vector<std::string>{"never"});
  c.ping();
  auto deadline = Clock::now() + 3s;
  while (s.connection_count() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  CHECK(s.connection_count() == 0);
  CHECK_THROWS_AS(c.ping(), Error);
}

TEST_CASE("a client waiting when the server stops gets an error", "[rendezvous][server]") {
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  Client c(opts(s, secret));
  auto fut = std::async(std::launch::async, [&] { c.wait({"never"}, 20s); });
  CHECK(fut.wait_for(100ms) == std::future_status::timeout);
  auto t0 = Clock::now();
  s.stop();
  REQUIRE(fut.wait_for(3s) == std::future_status::ready);
  CHECK_THROWS_WITH(fut.get(), Catch::Contains("stopped"));
  CHECK(Clock::now() - t0 < 2s);
  s.stop();  // idempotent
}

TEST_CASE("connect retries with backoff until the server appears", "[rendezvous][client]") {
  auto secret = generate_secret();
  // Find a free port, release it, start the server there a little later.
  std::uint16_t port;
  {
    Server probe(secret, "127.0.0.1");
    port = probe.port();
  }
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    auto s = std::make_unique<Server>(secret, "127.0.0.1", port);
    s->start();
    return s;
  });
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.secret = secret;
  o.connect_timeout = 5s;
  Client c(o);
  c.set("k", "v");
  auto server = later.get();
  CHECK(server->get("k") == "v");
}

TEST_CASE("connect gives up at its deadline naming the address", "[rendezvous][client]") {
  std::uint16_t port;
  {
    Server probe("x", "127.0.0.1");
    port = probe.port();
  }
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.secret = "x";
  o.connect_timeout = 400ms;
  o.who = "rank 3";
  auto t0 = Clock::now();
  CHECK_THROWS_WITH(Client(o), Catch::Contains("127.0.0.1:" + std::to_string(port)) &&
                                   Catch::Contains("rank 3") && Catch::Contains("refused"));
  CHECK(Clock::now() - t0 < 2s);
}

TEST_CASE("many clients at once", "[rendezvous][server]") {
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  constexpr int kClients = 64;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      Client c(opts(s, secret));
      c.set("rank/" + std::to_string(i), std::to_string(i));
      if (c.add("count", 1) == kClients) c.set("all", "1");
      c.wait({"all"}, 10s);
      std::vector<std::string> keys;
      for (int j = 0; j < kClients; ++j) keys.push_back("rank/" + std::to_string(j));
      auto v = c.multi_get(keys);
      bool good = true;
      for (int j = 0; j < kClients; ++j) good = good && v[j] == std::to_string(j);
      if (good) ok++;
    });
  for (auto& t : threads) t.join();
  CHECK(ok == kClients);
}

TEST_CASE("an idle rank's connection holds a small read buffer, a large frame still passes",
          "[rendezvous][server]") {
  // At 16,384 ranks every byte per connection counts: each used to hold a 16 KiB read
  // buffer after its first request (256 MiB in all, bench/rendezvous_load.sh).
  auto secret = generate_secret();
  Server s(secret, "127.0.0.1");
  s.start();
  constexpr int kClients = 100;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<Client>(opts(s, secret)));
    clients.back()->set("info/" + std::to_string(i), std::string(80, 'x'));
  }
  auto st = s.stats();
  CHECK(st.buffer_bytes <= kClients * 2048u);
  std::string big(1u << 20, 'b');
  clients[0]->set("big", big);
  CHECK(clients[1]->get("big") == big);
}

TEST_CASE("an error on the I/O thread reaches the owner instead of only the log",
          "[rendezvous][server]") {
  const std::string secret = generate_secret();
  Server server(secret, "127.0.0.1", 0);
  server.start();
  CHECK_FALSE(server.failure().failed());
  server.post([] { throw std::runtime_error("disk full while saving the store"); });
  pollfd p{server.failure().fd(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  CHECK(hvdrun::describe(server.failure().get()) == "disk full while saving the store");
  CHECK_THROWS_WITH(server.failure().rethrow_if_failed(), "disk full while saving the store");
  // In-process calls no longer wait for a thread that is gone: they name its error.
  CHECK_THROWS_WITH(server.set("k", "v"), Catch::Contains("disk full while saving the store"));
  server.stop();
}
