// The host leaders' mesh (runtime/frames/frame_comm.h) when a dial's first attempts fail: a
// doorman stands in front of rank 0's frame port (rank 1 reads the doorman's address from
// the store) and closes rank 1's first connections as an acceptor's pending cap or a reset
// would, before relaying the next one to rank 0. The dial is tried again and the pair
// connects; a wrong proof from the other end is never tried again.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "rendezvous/memory_store.h"
#include "runtime/frames/frame_comm.h"
#include "tests/runtime/frames/loopback_socket.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::UniqueFd;
using hvdrun::rendezvous::MemoryStore;
using hvdrun::runtime::FrameComm;
using namespace std::chrono_literals;

namespace {

const std::string kSecret(64, 's');
constexpr std::size_t kHelloBytes = 64;  // magic 8, ranks 4 + 4, nonce 16, proof 32
constexpr std::size_t kProofBytes = 32;

std::string ip_of(int rank) { return "127.0.0." + std::to_string(rank + 1); }

// What the doorman does with one of the first connections it takes.
enum class Drop {
  kAfterHello,  // reads the hello, then closes: what an acceptor's pending cap does
  kReset,       // closes at once with a reset, reading nothing
  kWrongProof,  // reads the hello and answers with a proof that is not the job secret's
};

class Doorman {
 public:
  // `target` is rank 0's published "host port nonce"; `drops` the fate of the first
  // connections, in order; the one after them is relayed to rank 0.
  Doorman(std::vector<Drop> drops, const std::string& target) : drops_(std::move(drops)) {
    const auto sp1 = target.find(' '), sp2 = target.rfind(' ');
    nonce_hex_ = target.substr(sp2 + 1);
    target_ =
        hvdrun::testing::resolve_v4(target.substr(0, sp1), target.substr(sp1 + 1, sp2 - sp1 - 1));
    listener_ = hvdrun::testing::listen_on_127_0_0_9(8, port_);
    std::array<int, 2> stop{};
    REQUIRE(::pipe2(stop.data(), O_CLOEXEC) == 0);
    stop_read_.reset(stop[0]);
    stop_write_.reset(stop[1]);
    thread_ = std::thread([this] { run(); });
  }
  ~Doorman() {
    const char bye = 0;
    (void)::write(stop_write_.get(), &bye, 1);
    thread_.join();
  }
  Doorman(const Doorman&) = delete;
  Doorman& operator=(const Doorman&) = delete;

  // The doorman's address for the store, with rank 0's nonce (the proofs name ranks and
  // nonces, not addresses, so a relayed connection proves what a direct one would).
  std::string value() const { return "127.0.0.9 " + std::to_string(port_) + " " + nonce_hex_; }
  // Connections taken so far.
  int connections() const { return connections_.load(); }

 private:
  static bool read_exact(int fd, unsigned char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t r = ::read(fd, p, n);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }

  void run() {
    for (std::size_t i = 0; i <= drops_.size(); ++i) {
      std::array<pollfd, 2> fds{{{listener_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}}};
      if (::poll(fds.data(), fds.size(), -1) <= 0 || fds[1].revents) return;
      UniqueFd fd(::accept(listener_.get(), nullptr, nullptr));
      if (!fd) return;
      ++connections_;
      if (i == drops_.size()) return relay(fd.get());
      std::array<unsigned char, kHelloBytes> hello{};
      if (drops_[i] == Drop::kReset) {
        const linger now{1, 0};
        ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &now, sizeof(now));
      } else if (read_exact(fd.get(), hello.data(), hello.size()) &&
                 drops_[i] == Drop::kWrongProof) {
        const std::array<unsigned char, kProofBytes> wrong{};
        if (::send(fd.get(), wrong.data(), wrong.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(wrong.size()))
          (void)read_exact(fd.get(), hello.data(), 1);  // until the dialler closes
      }
    }
  }

  // Forwards every byte both ways between rank 1 (`near`) and rank 0 until one closes.
  void relay(int near) {
    UniqueFd far(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(far.get(), reinterpret_cast<sockaddr*>(&target_), sizeof(target_)) != 0) return;
    std::array<unsigned char, 65536> buf{};
    for (;;) {
      std::array<pollfd, 3> fds{
          {{near, POLLIN, 0}, {far.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}}};
      if (::poll(fds.data(), fds.size(), -1) <= 0 || fds[2].revents) return;
      for (std::size_t k = 0; k < 2; ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const int from = fds[k].fd, to = fds[1 - k].fd;
        const ssize_t r = ::read(from, buf.data(), buf.size());
        if (r <= 0 || ::send(to, buf.data(), static_cast<std::size_t>(r), MSG_NOSIGNAL) != r)
          return;
      }
    }
  }

  std::vector<Drop> drops_;
  std::string nonce_hex_;
  sockaddr_in target_{};
  UniqueFd listener_;
  UniqueFd stop_read_, stop_write_;  // the destructor's word to the thread
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// What became of one pair through a doorman.
struct Outcome {
  std::string zero, one;           // each rank's error, or ""
  std::vector<float> sum;          // rank 1's allreduce of 1.0 on both ranks
  int connections = 0;             // the doorman took
  std::chrono::milliseconds took;  // rank 1's connect, failed or not
};

// Rank 0 listens behind a doorman that does `drops` first; rank 1 dials it, and both run
// one allreduce once connected.
Outcome through_doorman(const std::string& prefix, const std::vector<Drop>& drops,
                        std::chrono::milliseconds timeout) {
  MemoryStore store;
  FrameComm zero(store, prefix, 0, 2, ip_of(0), kSecret, timeout, timeout);
  const std::string key = prefix + "/addr/0";
  const auto published = store.get(key);
  REQUIRE(published);
  Doorman doorman(drops, *published);
  store.set(key, doorman.value());
  const auto pair = [](FrameComm& comm, std::vector<float>& v) {
    comm.connect(hvdrun::runtime::Topology::kFullMesh, 0);
    comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  };
  std::vector<float> zeros(4, 1.0F);
  auto rank0 = std::async(std::launch::async, [&] { return error_of([&] { pair(zero, zeros); }); });
  Outcome out;
  out.sum.assign(4, 1.0F);
  {
    FrameComm one(store, prefix, 1, 2, ip_of(1), kSecret, timeout, timeout);
    const auto start = std::chrono::steady_clock::now();
    out.one = error_of([&] { one.connect(hvdrun::runtime::Topology::kFullMesh, 0); });
    out.took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    if (out.one.empty()) out.one = error_of([&] { pair(one, out.sum); });
  }
  out.zero = rank0.get();
  out.connections = doorman.connections();
  return out;
}

}  // namespace

TEST_CASE(
    "frame mesh: a dial closed before the acceptor's proof, or reset, is tried again and "
    "connects",
    "[frames][security]") {
  const auto out = through_doorman("t/frames/dial/retry", {Drop::kAfterHello, Drop::kReset}, 10s);
  INFO("rank 0: " << out.zero << "\nrank 1: " << out.one);
  CHECK(out.zero.empty());
  CHECK(out.one.empty());
  CHECK(out.sum == std::vector<float>(4, 2.0F));
  CHECK(out.connections == 3);  // two dropped, the third relayed
  CHECK(out.took < 5s);         // backoff of tens of milliseconds, not seconds
}

TEST_CASE("frame mesh: a wrong proof from the acceptor fails the dial at once, never retried",
          "[frames][security]") {
  const auto out = through_doorman("t/frames/dial/proof", {Drop::kWrongProof}, 4s);
  INFO("rank 0: " << out.zero << "\nrank 1: " << out.one);
  CHECK_THAT(out.one, Catch::Contains("rank 1 connecting to rank 0 at 127.0.0.9:") &&
                          Catch::Contains("the other end did not prove the job secret"));
  CHECK(out.connections == 1);
  CHECK(out.took < 2s);  // at once, not at the 4 s deadline
  CHECK_THAT(out.zero, Catch::Contains("rank(s) 1 did not connect"));
}
