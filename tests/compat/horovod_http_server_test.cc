// The Horovod HTTP rendezvous against the request sequence Horovod's gloo ranks make
// (replayed by hand, and for real through Gloo's own full-mesh rendezvous), and against
// malformed and hostile requests while a well-formed client keeps working.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "compat/horovod_http_server.h"
#include "hostfile/placement.h"
#include "tests/compat/http_test_client.h"

namespace hvdrun::compat {
namespace {

using testing::http_request;
using testing::HttpConnection;
using testing::replay_horovod_scope;
using namespace std::chrono_literals;

hostfile::Placement two_by_two() { return hostfile::place({{"hostA", 2}, {"hostB", 2}}, 4); }

std::chrono::steady_clock::time_point in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

/// Polls `pred` until it holds or 5 s pass: for counters updated on the server's thread
/// just after the client has seen the effect.
template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = in(5s);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

TEST_CASE("Horovod request sequence for np=4 on 2 hosts: global, local_<host>, cross_<lr>") {
  auto placement = two_by_two();
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();
  const auto deadline = in(20s);

  // Each rank runs Horovod's three rendezvous in order, as GlooContext::Initialize does.
  std::vector<std::future<std::vector<std::vector<std::string>>>> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      const auto& slot = placement.ranks[static_cast<std::size_t>(r)];
      const std::string host = placement.hosts[static_cast<std::size_t>(slot.host_index)].name;
      std::vector<std::vector<std::string>> seen;
      seen.push_back(replay_horovod_scope(port, "global", r, 4, "g" + std::to_string(r), deadline));
      seen.push_back(replay_horovod_scope(port, "local_" + host, slot.local_rank, slot.local_size,
                                          "l" + std::to_string(r), deadline));
      seen.push_back(replay_horovod_scope(port, "cross_" + std::to_string(slot.local_rank),
                                          slot.cross_rank, slot.cross_size, "c" + std::to_string(r),
                                          deadline));
      return seen;
    }));
  }
  std::vector<std::vector<std::vector<std::string>>> seen;
  for (auto& f : ranks) seen.push_back(f.get());

  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(seen[r][0] == std::vector<std::string>{"g0", "g1", "g2", "g3"});
  }
  // hostA holds ranks 0,1; hostB 2,3. cross_0 = {0, 2}, cross_1 = {1, 3}.
  CHECK(seen[0][1] == std::vector<std::string>{"l0", "l1"});
  CHECK(seen[3][1] == std::vector<std::string>{"l2", "l3"});
  CHECK(seen[0][2] == std::vector<std::string>{"c0", "c2"});
  CHECK(seen[3][2] == std::vector<std::string>{"c1", "c3"});

  // Every scope was finished by all its ranks, so all data is gone: 1 global + 2 local
  // + 2 cross scopes were cleared.
  auto stats = server.stats();
  CHECK(stats.scopes == 0);
  CHECK(stats.stored_bytes == 0);
  CHECK(stats.scopes_cleared == 5);
  CHECK(stats.rejected == 0);
  CHECK(http_request(port, "GET", "/global/0").status == 404);
}

TEST_CASE("GET answers 404 until the key is PUT, a sized scope clears only when all finish") {
  auto placement = two_by_two();
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();

  auto miss = http_request(port, "GET", "/local_hostA/1");
  CHECK(miss.status == 404);
  CHECK(miss.headers.find("Content-Length: 0") != std::string::npos);
  REQUIRE(http_request(port, "PUT", "/local_hostA/1", std::string("\0\1bin", 5)).status == 200);
  auto hit = http_request(port, "GET", "/local_hostA/1");
  CHECK(hit.status == 200);
  CHECK(hit.body == std::string("\0\1bin", 5));

  // local_hostA has 2 ranks: a repeated DELETE by rank 0 must not clear it.
  CHECK(http_request(port, "DELETE", "/local_hostA/0").status == 200);
  CHECK(http_request(port, "DELETE", "/local_hostA/0").status == 200);
  CHECK(http_request(port, "GET", "/local_hostA/1").status == 200);
  CHECK(http_request(port, "DELETE", "/local_hostA/1").status == 200);
  CHECK(http_request(port, "GET", "/local_hostA/1").status == 404);
  CHECK(server.stats().scopes_cleared == 1);

  // A rank outside the scope, or a non-number, cannot finish it.
  CHECK(http_request(port, "DELETE", "/local_hostA/2").status == 400);
  CHECK(http_request(port, "DELETE", "/global/rank_0").status == 400);
  CHECK(http_request(port, "DELETE", "/global/-1").status == 400);
}

TEST_CASE("ad-hoc scopes (process sets): DELETE removes the named key") {
  auto placement = two_by_two();
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();
  const std::string scope = "/global_process_set_hash_1f2e3d/";
  REQUIRE(http_request(port, "PUT", scope + "0", "a").status == 200);
  REQUIRE(http_request(port, "PUT", scope + "1", "b").status == 200);
  CHECK(http_request(port, "DELETE", scope + "0").status == 200);
  CHECK(http_request(port, "GET", scope + "0").status == 404);
  CHECK(http_request(port, "GET", scope + "1").body == "b");
  CHECK(http_request(port, "DELETE", scope + "1").status == 200);
  CHECK(http_request(port, "DELETE", scope + "1").status == 200);  // idempotent
  CHECK(server.stats().scopes == 0);
}

TEST_CASE("IPv6 host names with a zone index make valid local scopes") {
  auto placement = hostfile::place({{"fe80::1%eth0", 1}, {"::1", 1}}, 2);
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();
  REQUIRE(http_request(port, "PUT", "/local_fe80::1%eth0/0", "x").status == 200);
  CHECK(http_request(port, "GET", "/local_fe80::1%eth0/0").body == "x");
  CHECK(http_request(port, "DELETE", "/local_fe80::1%eth0/0").status == 200);
  CHECK(server.stats().scopes_cleared == 1);  // local size 1: cleared at once
  CHECK(http_request(port, "GET", "/rank_and_size/::1:0").body == "1,2,0,1,1,2");
}

TEST_CASE("rank_and_size serves each slot's coordinates as elastic Horovod reads them") {
  auto placement = hostfile::place({{"hostA", 3}, {"hostB", 1}}, 4);
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  const auto port = server.port();
  CHECK(http_request(port, "GET", "/rank_and_size/hostA:2").body == "2,4,2,3,0,1");
  CHECK(http_request(port, "GET", "/rank_and_size/hostB:0").body == "3,4,0,1,1,2");
  CHECK(http_request(port, "GET", "/rank_and_size/hostC:0").status == 404);
  CHECK(http_request(port, "PUT", "/rank_and_size/hostA:0", "x").status == 405);
}

TEST_CASE("keep-alive: several requests on one connection") {
  auto placement = two_by_two();
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  HttpConnection c(server.port());
  c.send_request("PUT", "/global/3", "v3");
  CHECK(c.read_response().status == 200);
  c.send_request("GET", "/global/3");
  auto r = c.read_response();
  CHECK(r.status == 200);
  CHECK(r.body == "v3");
  // Pipelined: two requests in one write, two answers in order.
  c.send_raw("GET /global/2 HTTP/1.1\r\nHost: x\r\n\r\nGET /global/3 HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(c.read_response().status == 404);
  CHECK(c.read_response().body == "v3");
  CHECK(server.stats().open_connections == 1);
}

TEST_CASE("malformed requests get 4xx or a closed connection while a good client keeps going") {
  auto placement = two_by_two();
  HttpServerLimits limits;
  limits.max_body_bytes = 64 << 10;
  limits.idle_timeout = 500ms;
  limits.header_timeout = 500ms;  // a silent or half-sent header is dropped after it
  HorovodHttpServer server(placement, "127.0.0.1", 0, limits);
  server.start();
  const auto port = server.port();

  // A well-formed client cycling PUT/GET in its own ad-hoc scope the whole time.
  std::atomic<bool> done{false};
  auto good = std::async(std::launch::async, [&] {
    int rounds = 0;
    while (!done.load() || rounds < 20) {
      const std::string key = "/good/" + std::to_string(rounds % 7);
      if (http_request(port, "PUT", key, "value" + std::to_string(rounds)).status != 200) return -1;
      auto got = http_request(port, "GET", key);
      if (got.status != 200 || got.body != "value" + std::to_string(rounds)) return -1;
      ++rounds;
    }
    return rounds;
  });

  SECTION("methods and targets") {
    CHECK(http_request(port, "POST", "/global/0", "x").status == 405);
    CHECK(http_request(port, "BREW", "/global/0").status == 405);
    CHECK(http_request(port, "HEAD", "/global/0").status == 405);
    CHECK(http_request(port, "GET", "/global").status == 400);
    CHECK(http_request(port, "GET", "/").status == 400);
    CHECK(http_request(port, "GET", "//0").status == 400);
    CHECK(http_request(port, "PUT", "/global/", "x").status == 400);
    CHECK(http_request(port, "GET", "/../../etc/passwd").status == 400);
    CHECK(http_request(port, "GET", "/global/..").status == 400);
    CHECK(http_request(port, "GET", "/../0").status == 400);
    CHECK(http_request(port, "GET", "/global/%2e%2e").status == 404);  // literal, never decoded
    CHECK(http_request(port, "GET", "/global/a%2fb").status == 404);
    CHECK(http_request(port, "GET", "/global/a b").status == 400);
    CHECK(http_request(port, "GET", "/global/0?x=1").status == 400);
    CHECK(http_request(port, "GET", "/a/b/c").status == 400);
    CHECK(http_request(port, "GET", "http://evil/global/0").status == 400);
  }
  SECTION("oversized body is refused with 413 and the connection closed") {
    HttpConnection c(port);
    c.send_raw("PUT /global/0 HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n");
    c.send_raw(std::string(70 << 10, 'x'));
    auto r = c.read_response();
    CHECK(r.status == 413);
    CHECK(c.wait_closed());
    CHECK(http_request(port, "GET", "/global/0").status == 404);  // nothing stored
  }
  SECTION("100-continue for a body over the cap is refused before it is sent") {
    HttpConnection c(port);
    c.send_raw(
        "PUT /global/0 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        "Content-Length: 10000000\r\n\r\n");
    CHECK(c.read_response().status == 413);
  }
  SECTION("100-continue within the cap is answered and the body stored") {
    HttpConnection c(port);
    c.send_raw(
        "PUT /global/1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    CHECK(c.read_response().status == 100);
    c.send_raw("abc");
    CHECK(c.read_response().status == 200);
    CHECK(http_request(port, "GET", "/global/1").body == "abc");
  }
  SECTION("oversized header block gets 431") {
    HttpConnection c(port);
    c.send_raw("GET /global/0 HTTP/1.1\r\nX-Big: " + std::string(16 << 10, 'h') + "\r\n\r\n");
    CHECK(c.read_response().status == 431);
  }
  SECTION("garbage bytes get 400 and a closed connection") {
    HttpConnection c(port);
    c.send_raw(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n", 22));
    auto r = c.read_response();
    CHECK((r.status == 400 || r.closed));
    CHECK(c.wait_closed());
  }
  SECTION("bad Content-Length gets 400") {
    HttpConnection c(port);
    c.send_raw("PUT /global/0 HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n");
    CHECK(c.read_response().status == 400);
  }
  SECTION("truncated request: the server drops it when the client leaves or idles") {
    {
      HttpConnection c(port);
      c.send_raw("PUT /global/0 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly-part");
    }  // client gone mid-body
    HttpConnection idle(port);
    idle.send_raw("GET /global/0 HTTP/1.1\r\nHos");
    CHECK(idle.wait_closed());  // header_timeout (500 ms) closes it
    CHECK(http_request(port, "GET", "/global/0").status == 404);
  }
  SECTION("a connection that never sends anything is dropped after the idle timeout") {
    HttpConnection silent(port);
    CHECK(silent.wait_closed());
    // The socket closes before the server's handler counts the drop.
    CHECK(eventually([&] { return server.stats().dropped_connections >= 1; }));
  }

  done = true;
  CHECK(good.get() >= 20);
}

TEST_CASE("connections beyond the cap are closed at once, the others still served") {
  auto placement = two_by_two();
  HttpServerLimits limits;
  limits.max_connections = 2;
  HorovodHttpServer server(placement, "127.0.0.1", 0, limits);
  server.start();
  HttpConnection a(server.port());
  HttpConnection b(server.port());
  a.send_request("GET", "/global/0");  // make sure both are accepted first
  CHECK(a.read_response().status == 404);
  b.send_request("GET", "/global/0");
  CHECK(b.read_response().status == 404);
  HttpConnection c(server.port());
  CHECK(c.wait_closed());
  a.send_request("PUT", "/global/0", "still-ok");
  CHECK(a.read_response().status == 200);
}

TEST_CASE("stop closes open connections and is idempotent, binding errors name the address") {
  auto placement = two_by_two();
  HorovodHttpServer server(placement, "127.0.0.1");
  server.start();
  HttpConnection c(server.port());
  server.stop();
  CHECK(c.wait_closed());
  server.stop();

  HorovodHttpServer taken(placement, "127.0.0.1");
  try {
    HorovodHttpServer clash(placement, "127.0.0.1", taken.port());
    FAIL("binding a port in use succeeded");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("127.0.0.1:" + std::to_string(taken.port())));
  }
  CHECK_THROWS_WITH(HorovodHttpServer(placement, "not-an-ip"), Catch::Contains("not-an-ip"));
}

}  // namespace hvdrun::compat
