// Store throughput benchmark: C client processes each doing ITERS x (set + get) with a
// 64-byte value, (a) against the hvdrun rendezvous server (authenticated, HMAC per
// frame) and (b) against a bare TCP request/response loop on one Boost.Asio thread that
// exchanges frames of exactly the same sizes but does no store work and no crypto: the
// physical limit of this host for that pattern. Prints ops/s for both and the ratio.
//   hvdrun_store_bench [CLIENTS=8] [ITERS=5000] [ROUNDS=3]   (best round of each)
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <utility>  // before Asio: Boost 1.74 needs std::exchange declared

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "rendezvous/client.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"

namespace asio = boost::asio;
using namespace hvdrun::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kValue(64, 'v');
std::string key_for(int client, int i) {
  return "bench/" + std::to_string(client) + "/" + std::to_string(i % 64);
}

// Frame sizes of our protocol for one set and one get, requests and responses.
struct Sizes {
  std::size_t set_req, set_resp, get_req, get_resp;
};
Sizes frame_sizes() {
  FrameCodec c("k", false);
  Request set;
  set.op = Op::kSet;
  set.keys = {key_for(0, 0)};
  set.values = {kValue};
  Request get;
  get.op = Op::kGet;
  get.keys = {key_for(0, 0)};
  Response ok;
  Response val;
  val.values = {kValue};
  return {c.seal(encode(set)).size(), c.seal(encode(ok)).size(), c.seal(encode(get)).size(),
          c.seal(encode(val)).size()};
}

// Runs `clients` forked processes of `body(client)`; returns wall seconds from the start
// signal to the last exit.
template <typename Body>
double run_clients(int clients, Body body) {
  int go[2];
  if (::pipe(go) != 0) std::exit(1);
  std::vector<pid_t> pids;
  for (int c = 0; c < clients; ++c) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(go[1]);
      char b;
      if (::read(go[0], &b, 1) < 0) ::_exit(3);  // EOF is the start signal
      try {
        body(c);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "client %d: %s\n", c, e.what());
        ::_exit(1);
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  ::close(go[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let them all block on go
  auto t0 = Clock::now();
  ::close(go[1]);
  int bad = 0;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ++bad;
  }
  if (bad) std::fprintf(stderr, "%d clients failed\n", bad);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --- bare request/response server: same frame sizes, no store, no MAC ---

class BareServer {
 public:
  explicit BareServer(Sizes s)
      : sizes_(s), acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}) {
    acceptor_.listen(4096);
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~BareServer() {
    io_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  struct Conn : std::enable_shared_from_this<Conn> {
    Conn(asio::ip::tcp::socket s, Sizes z) : sock(std::move(s)), sizes(z) {
      sock.set_option(asio::ip::tcp::no_delay(true));
    }
    void read() {
      asio::async_read(sock, asio::buffer(hdr, 4), [self = shared_from_this()](auto ec, auto) {
        if (ec) return;
        self->body.resize(get_u32(self->hdr));
        asio::async_read(self->sock, asio::buffer(self->body), [self](auto e2, auto) {
          if (e2) return;
          // The first payload byte is the op, as in the real protocol.
          bool is_set = !self->body.empty() && self->body[0] == static_cast<char>(Op::kSet);
          std::size_t n = is_set ? self->sizes.set_resp : self->sizes.get_resp;
          self->out.assign(n, 'r');
          put_u32(self->out.data(), static_cast<std::uint32_t>(n - 4));
          asio::async_write(self->sock, asio::buffer(self->out), [self](auto e3, auto) {
            if (!e3) self->read();
          });
        });
      });
    }
    asio::ip::tcp::socket sock;
    Sizes sizes;
    char hdr[4];
    std::string body, out;
  };
  void accept() {
    acceptor_.async_accept([this](auto ec, asio::ip::tcp::socket s) {
      if (ec) return;
      std::make_shared<Conn>(std::move(s), sizes_)->read();
      accept();
    });
  }
  Sizes sizes_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
};

void bare_client(std::uint16_t port, Sizes s, int iters) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw std::runtime_error("connect");
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto exchange = [&](std::size_t req, char op) {
    std::string f(req, 'q');
    put_u32(f.data(), static_cast<std::uint32_t>(req - 4));
    f[4] = op;
    if (::send(fd, f.data(), f.size(), 0) != static_cast<ssize_t>(f.size()))
      throw std::runtime_error("send");
    char hdr[4];
    if (::recv(fd, hdr, 4, MSG_WAITALL) != 4) throw std::runtime_error("recv");
    std::string body(get_u32(hdr), '\0');
    if (::recv(fd, body.data(), body.size(), MSG_WAITALL) != static_cast<ssize_t>(body.size()))
      throw std::runtime_error("recv");
  };
  for (int i = 0; i < iters; ++i) {
    exchange(s.set_req, static_cast<char>(Op::kSet));
    exchange(s.get_req, static_cast<char>(Op::kGet));
  }
  ::close(fd);
}

}  // namespace

static int run(int argc, char** argv) {
  const int clients = hvdrun::bench::int_arg(argc, argv, 1, 8);
  const int iters = hvdrun::bench::int_arg(argc, argv, 2, 5000);
  const int rounds = hvdrun::bench::int_arg(argc, argv, 3, 3);
  const double ops = 2.0 * clients * iters;
  auto sizes = frame_sizes();
  std::printf("frames: set %zu/%zu bytes, get %zu/%zu bytes (request/response)\n", sizes.set_req,
              sizes.set_resp, sizes.get_req, sizes.get_resp);

  // Alternate the two servers for ROUNDS rounds and keep each one's best, so a burst of
  // load from other processes on this host does not decide the ratio.
  double bare_s = 1e30, ours_s = 1e30;
  for (int round = 0; round < rounds; ++round) {
    {
      BareServer bare(sizes);
      auto port = bare.port();
      bare_s =
          std::min(bare_s, run_clients(clients, [&](int) { bare_client(port, sizes, iters); }));
    }
    {
      auto secret = generate_secret();
      Server server(secret, "127.0.0.1");
      server.start();
      auto port = server.port();
      ours_s = std::min(ours_s, run_clients(clients, [&](int c) {
                          ClientOptions o;
                          o.host = "127.0.0.1";
                          o.port = port;
                          o.secret = secret;
                          Client cl(o);
                          for (int i = 0; i < iters; ++i) {
                            cl.set(key_for(c, i), kValue);
                            if (!cl.get(key_for(c, i))) throw std::runtime_error("get lost a key");
                          }
                        }));
      server.stop();
    }
  }
  std::printf(
      "clients=%d ops=%.0f bare_tcp_ops_per_s=%.0f hvdrun_store_ops_per_s=%.0f "
      "ratio=%.2f\n",
      clients, ops, ops / bare_s, ops / ours_s, bare_s / ours_s);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
}
