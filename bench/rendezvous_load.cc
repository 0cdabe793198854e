// Rendezvous load generator: RANKS simulated ranks against the real rendezvous server,
// speaking the real authenticated protocol (rendezvous/protocol.h: challenge-response,
// HMAC on every frame), each doing what a rank does at start-up -- the check-in of
// runtime/world/world.cc (add checkin/<r>, set info/<r>, add arrived/<n>, the last one sets
// ready, wait ready) -- and then one store barrier (World::arrive). The server runs in a
// child process (its own descriptor limit: 16,384 connections are 32,768 descriptors on
// one machine); the simulated ranks are state machines on one Boost.Asio thread here,
// 16 per simulated host (one loopback address each, 127.1.x.y). At most --window
// connections are in their handshake at once (default 64: one host's share of the
// server's cap on unauthenticated connections per source, rendezvous/server.h).
//
// With --per-host K the ranks check in through their host's leader instead: one
// connection per host of K ranks carrying one batched host check-in (multi_set of the K
// info records, add arrived/<n> by K, wait ready), as runtime/host_checkin.h does.
//
//   hvdrun_rendezvous_load RANKS [--per-host K] [--window W]
// Prints: ranks, connections the server accepted (retries included) and the most it held
// open at one sample (every 5 ms: a short run may end between samples), check-in wall,
// barrier wall, total wall, requests/s, p50/p99 request latency, server CPU seconds and
// peak RSS.
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 needs std::exchange declared

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "common/fd_limit.h"
#include "rendezvous/protocol.h"
#include "rendezvous/server.h"

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
namespace rdzv = hvdrun::rendezvous;

namespace {

struct Config {
  int ranks = 1024;
  int per_host = 0;  // 0: every rank connects itself
  int window = 64;   // connections in their handshake at once
};

// What the server process reports when the load is over.
struct ServerReport {
  std::uint64_t accepted = 0;
  std::size_t peak_connections = 0;
  double cpu_s = 0;
  long rss_kib = 0;
  std::uint64_t evicted = 0;
  std::uint64_t accept_failures = 0;
};

// The rendezvous server in a child process; port() once it listens, report() at the end.
class ServerProcess {
 public:
  explicit ServerProcess(const std::string& secret) {
    int up[2];
    int down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(up[0]);
      ::close(down[1]);
      serve(secret, up[1], down[0]);
    }
    ::close(up[1]);
    ::close(down[0]);
    from_ = up[0];
    to_ = down[1];
    if (::read(from_, &port_, sizeof port_) != sizeof port_)
      throw std::runtime_error("server process did not start");
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::close(to_);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  std::uint16_t port() const { return port_; }

  // Ends the server and returns what it measured.
  ServerReport report() {
    ::close(std::exchange(to_, -1));
    ServerReport r;
    if (::read(from_, &r, sizeof r) != sizeof r) throw std::runtime_error("no server report");
    ::waitpid(std::exchange(pid_, -1), nullptr, 0);
    return r;
  }

 private:
  [[noreturn]] static void serve(const std::string& secret, int up, int down) {
    hvdrun::raise_fd_limit();
    rdzv::Server server(secret, "127.0.0.1", 0);
    server.start();
    const std::uint16_t port = server.port();
    if (::write(up, &port, sizeof port) != sizeof port) ::_exit(1);
    ServerReport r;
    std::thread sampler([&] {
      // The parent closes `down` when the load is over; until then sample the count.
      pollfd p{down, POLLIN, 0};
      while (::poll(&p, 1, 5) == 0)
        r.peak_connections = std::max(r.peak_connections, server.connection_count());
    });
    sampler.join();
    // Once more now: the parent still holds every connection while it waits for this.
    r.peak_connections = std::max(r.peak_connections, server.connection_count());
    auto st = server.stats();
    server.stop();
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    r.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    r.rss_kib = ru.ru_maxrss;
    r.evicted = st.evicted;
    r.accepted = st.accepted;
    r.accept_failures = st.accept_failures;
    if (::write(up, &r, sizeof r) != sizeof r) ::_exit(1);
    ::_exit(0);
  }

  pid_t pid_ = -1;
  int from_ = -1;
  int to_ = -1;
  std::uint16_t port_ = 0;
};

// Shared state of the load: the counters every simulated connection reports to.
struct Load {
  Config cfg;
  std::string secret;
  tcp::endpoint server;
  asio::io_context io;
  std::vector<double> latencies_us;
  std::deque<std::function<void()>> waiting_to_connect;
  int connecting = 0;
  int checked_in = 0;
  int finished = 0;
  int connections = 0;
  int retries = 0;
  std::mt19937_64 rng{std::random_device{}()};
  Clock::time_point start;
  Clock::time_point checkin_done;
  Clock::time_point barrier_done;
  std::string failure;

  void fail(const std::string& why) {
    if (failure.empty()) failure = why;
    io.stop();
  }
};

// One simulated connection: a rank, or a host leader carrying `count` ranks from `first`.
class Sim : public std::enable_shared_from_this<Sim> {
 public:
  Sim(Load& load, int first, int count)
      : load_(load), sock_(load.io), timer_(load.io), first_(first), count_(count) {}

  // A connection closed before it authenticated (the server's cap on unauthenticated
  // connections made room for newer ones) is retried as the real client does: after
  // 50 ms doubling up to 2 s, each with +-50 % jitter.
  void retry(const std::string& why) {
    if (++attempts_ > 30) return load_.fail("handshake: " + why + " (30 retries)");
    load_.retries++;
    boost::system::error_code ignored;
    sock_.close(ignored);
    rbuf_.clear();
    const double jitter = std::uniform_real_distribution<double>(0.5, 1.5)(load_.rng);
    const auto delay = std::chrono::milliseconds(static_cast<long long>(
        std::min(2000.0, 50.0 * (1 << std::min(attempts_ - 1, 6))) * jitter));
    timer_.expires_after(delay);
    timer_.async_wait([self = shared_from_this()](auto) { self->start(); });
  }

  void start() {
    // Each simulated host connects from its own loopback address, as hosts do from
    // theirs: one address for all 16,384 connections would make every connect() search
    // one shared ephemeral port range (the kernel's cost, not the server's).
    const int host = first_ / std::max(1, load_.cfg.per_host == 0 ? 16 : load_.cfg.per_host);
    sock_.open(tcp::v4());
    sock_.bind(tcp::endpoint(
        asio::ip::make_address_v4((127u << 24) | (1u << 16) | static_cast<unsigned>(host + 1)), 0));
    sock_.async_connect(load_.server, [self = shared_from_this()](auto ec) {
      if (ec) return self->load_.fail("connect: " + ec.message());
      asio::ip::tcp::no_delay nd(true);
      self->sock_.set_option(nd);
      self->read_frame([self](const std::string& greeting) { self->answer(greeting); });
    });
  }

 private:
  using Body = std::function<void(std::string)>;

  std::string key(const std::string& tail) const { return "hvdrun/g0/" + tail; }
  const std::string& n() const { return size_text_; }

  void answer(const std::string& greeting) {
    if (greeting.size() != rdzv::kGreeting.size() + rdzv::kMacBytes)
      return load_.fail("bad greeting");
    auto server_nonce = greeting.substr(rdzv::kGreeting.size());
    auto nonce = rdzv::random_bytes(rdzv::kMacBytes);
    rdzv::Hmac secret(load_.secret);
    write(rdzv::plain_frame(nonce + rdzv::Handshake::client_proof(secret, server_nonce, nonce)));
    read_frame([self = shared_from_this(), server_nonce, nonce](std::string ok) {
      rdzv::Hmac s(self->load_.secret);
      if (ok.empty() || ok[0] != '\0') return self->load_.fail("authentication refused");
      self->codec_.emplace(rdzv::Handshake::session_key(s, server_nonce, nonce), false);
      self->load_.connections++;
      self->load_.connecting--;
      if (!self->load_.waiting_to_connect.empty()) {
        auto next = std::move(self->load_.waiting_to_connect.front());
        self->load_.waiting_to_connect.pop_front();
        self->load_.connecting++;
        next();
      }
      self->check_in();
    });
  }

  // World::check_in, for one rank or (batched) for the host's ranks.
  void check_in() {
    if (count_ == 1) {
      auto r = std::to_string(first_);
      call(add_req(key("checkin/" + r), 1), [this, r](const rdzv::Response&) {
        rdzv::Request set;
        set.op = rdzv::Op::kSet;
        set.keys = {key("info/" + r)};
        set.values = {record(first_)};
        call(set, [this](const rdzv::Response&) { arrive_checkin(); });
      });
      return;
    }
    rdzv::Request set;
    set.op = rdzv::Op::kMultiSet;
    for (int r = first_; r < first_ + count_; ++r) {
      set.keys.push_back(key("info/" + std::to_string(r)));
      set.values.push_back(record(r));
    }
    call(add_req(key("hostcheckin/" + std::to_string(first_)), 1),
         [this, set](auto&) { call(set, [this](const rdzv::Response&) { arrive_checkin(); }); });
  }

  void arrive_checkin() {
    call(add_req(key("arrived/" + n()), count_), [this](const rdzv::Response& r) {
      auto wait = [this] {
        call(wait_req(key("ready")), [this](const rdzv::Response&) {
          if (++load_.checked_in == load_.cfg.ranks / count_) load_.checkin_done = Clock::now();
          barrier();
        });
      };
      if (r.number != load_.cfg.ranks) return wait();
      call(set_req(key("ready"), "1"), [wait](const rdzv::Response&) { wait(); });
    });
  }

  // World::arrive: the store barrier (batched: the leader counts its host's ranks).
  void barrier() {
    auto done_wait = [this] {
      call(wait_req(key("barrier/1/done")), [this](const rdzv::Response&) {
        if (++load_.finished == load_.cfg.ranks / count_) {
          load_.barrier_done = Clock::now();
          load_.io.stop();
        }
      });
    };
    call(set_req(key("barrier/rank/" + std::to_string(first_)), "1"), [this, done_wait](
                                                                          const rdzv::Response&) {
      call(add_req(key("barrier/1/count"), count_), [this, done_wait](const rdzv::Response& r) {
        if (r.number != load_.cfg.ranks) return done_wait();
        call(set_req(key("barrier/1/done"), std::to_string(first_)),
             [done_wait](const rdzv::Response&) { done_wait(); });
      });
    });
  }

  std::string record(int r) const {
    return "host=sim" + std::to_string(r / std::max(1, load_.cfg.per_host)) +
           " addr=127.0.0.1 size=" + n() + " pid=" + std::to_string(100000 + r);
  }
  static rdzv::Request add_req(std::string k, std::int64_t d) {
    rdzv::Request q;
    q.op = rdzv::Op::kAdd;
    q.keys = {std::move(k)};
    q.delta = d;
    return q;
  }
  static rdzv::Request set_req(std::string k, std::string v) {
    rdzv::Request q;
    q.op = rdzv::Op::kSet;
    q.keys = {std::move(k)};
    q.values = {std::move(v)};
    return q;
  }
  static rdzv::Request wait_req(std::string k) {
    rdzv::Request q;
    q.op = rdzv::Op::kWait;
    q.keys = {std::move(k)};
    q.timeout_ms = 120000;
    return q;
  }

  // One request and its response; records the round trip's latency.
  void call(const rdzv::Request& req, std::function<void(const rdzv::Response&)> then) {
    const auto sent = Clock::now();
    const bool is_wait = req.op == rdzv::Op::kWait;
    write(codec_->seal(rdzv::encode(req)));
    read_frame(
        [self = shared_from_this(), then = std::move(then), sent, is_wait](const std::string& b) {
          rdzv::Response r;
          try {
            r = rdzv::decode_response(self->codec_->open(b));
          } catch (const std::exception& e) {
            return self->load_.fail(std::string("response: ") + e.what());
          }
          if (r.status != rdzv::Status::kOk)
            return self->load_.fail("request failed: status " +
                                    std::to_string(static_cast<int>(r.status)) + " " + r.message);
          // A wait's time is how long the others took, not the server's latency.
          if (!is_wait)
            self->load_.latencies_us.push_back(
                std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
          then(r);
        });
  }

  void write(std::string frame) {
    auto buf = std::make_shared<std::string>(std::move(frame));
    asio::async_write(sock_, asio::buffer(*buf), [self = shared_from_this(), buf](auto ec, auto) {
      // Before authentication a failed write is a closed connection: the read retries.
      if (ec && self->codec_) self->load_.fail("write: " + ec.message());
    });
  }

  // Reads one length-prefixed frame body: from what an earlier read brought, else with
  // one read_some per arrival (a whole response, usually), as the real client does.
  void read_frame(Body then) {
    if (rbuf_.size() >= 4) {
      const std::size_t len = rdzv::get_u32(rbuf_.data());
      if (rbuf_.size() >= 4 + len) {
        std::string body = rbuf_.substr(4, len);
        rbuf_.erase(0, 4 + len);
        return then(std::move(body));
      }
    }
    sock_.async_read_some(asio::buffer(chunk_), [self = shared_from_this(), then = std::move(then)](
                                                    auto ec, auto n) mutable {
      if (ec && !self->codec_) return self->retry(ec.message());
      if (ec) return self->load_.fail("read: " + ec.message());
      self->rbuf_.append(self->chunk_.data(), n);
      self->read_frame(std::move(then));
    });
  }

  Load& load_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  int attempts_ = 0;
  int first_;
  int count_;
  std::string size_text_ = std::to_string(load_.cfg.ranks);
  std::optional<rdzv::FrameCodec> codec_;
  std::array<char, 2048> chunk_{};
  std::string rbuf_;
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

Config parse(int argc, char** argv) {
  Config c;
  c.ranks = hvdrun::bench::int_arg(argc, argv, 1, 1024);
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    int v = hvdrun::bench::int_arg(argc, argv, i + 1, 0);
    if (flag == "--per-host") {
      c.per_host = v;
    } else if (flag == "--window") {
      c.window = v;
    } else {
      std::fprintf(stderr, "%s: unknown option '%s' (--per-host K, --window W)\n", argv[0],
                   argv[i]);
      std::exit(2);
    }
  }
  if (c.ranks < 1 || c.window < 1 || c.per_host < 0 || (c.per_host && c.ranks % c.per_host)) {
    std::fprintf(stderr, "%s: RANKS must be positive and a multiple of --per-host\n", argv[0]);
    std::exit(2);
  }
  return c;
}

}  // namespace

namespace {

int run(int argc, char** argv) {
  Load load;
  load.cfg = parse(argc, argv);
  load.secret = rdzv::generate_secret();
  ServerProcess server(load.secret);
  hvdrun::raise_fd_limit();
  load.server = tcp::endpoint(asio::ip::make_address("127.0.0.1"), server.port());
  const int per = std::max(1, load.cfg.per_host);
  load.start = Clock::now();
  for (int first = 0; first < load.cfg.ranks; first += per) {
    auto sim = std::make_shared<Sim>(load, first, per);
    if (load.connecting < load.cfg.window) {
      load.connecting++;
      sim->start();
    } else {
      load.waiting_to_connect.emplace_back([sim] { sim->start(); });
    }
  }
  load.io.run();
  auto rep = server.report();
  if (!load.failure.empty()) {
    std::fprintf(stderr, "rendezvous_load: %d ranks: %s\n", load.cfg.ranks, load.failure.c_str());
    return 1;
  }
  auto ms = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - load.start).count();
  };
  const double wall_s = ms(load.barrier_done) / 1e3;
  const auto requests = load.latencies_us.size();
  std::printf(
      "ranks=%d per_host=%d server_connections=%llu peak_open=%zu checkin_ms=%.0f barrier_ms=%.0f "
      "total_ms=%.0f requests=%zu ops_per_s=%.0f p50_us=%.0f p99_us=%.0f server_cpu_s=%.2f "
      "server_rss_mib=%.1f evicted=%llu retries=%d\n",
      load.cfg.ranks, load.cfg.per_host, static_cast<unsigned long long>(rep.accepted),
      rep.peak_connections, ms(load.checkin_done), ms(load.barrier_done) - ms(load.checkin_done),
      ms(load.barrier_done), requests, static_cast<double>(requests) / wall_s,
      percentile(load.latencies_us, 0.5), percentile(load.latencies_us, 0.99), rep.cpu_s,
      static_cast<double>(rep.rss_kib) / 1024, static_cast<unsigned long long>(rep.evicted),
      load.retries);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rendezvous_load: %s\n", e.what());
    return 1;
  }
}
