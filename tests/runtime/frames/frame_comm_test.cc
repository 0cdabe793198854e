// The host leaders' authenticated mesh (runtime/frames/frame_comm.h) over loopback, with threads
// standing in for ranks on one MemoryStore: every collective against values computed here,
// a stranger at the listening port refused without holding up the job, and frames written
// into a connection by something other than the peer rejected with an error naming the
// peer (never a wrong value).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netdb.h>
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "rendezvous/memory_store.h"
#include "runtime/frames/frame_comm.h"
#include "runtime/reduce/reduce.h"
#include "runtime/reduce/shm_reduce.h"
#include "tests/runtime/frames/loopback_socket.h"
#include "tests/support/captured_log.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::rendezvous::MemoryStore;
using hvdrun::runtime::FrameComm;
using namespace std::chrono_literals;

namespace {

const std::string kSecret(64, 's');

std::string ip_of(int rank) { return "127.0.0." + std::to_string(rank + 1); }

// Runs `body` as each of `size` ranks at once; returns what each returned.
template <typename F>
auto as_ranks(int size, F body) {
  using R = decltype(body(0));
  std::vector<std::future<R>> futures;
  for (int r = 0; r < size; ++r) futures.push_back(std::async(std::launch::async, body, r));
  std::vector<R> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

// Connects to the address published under `key` as soon as it appears and says nothing:
// (connect's result, the socket).
std::future<std::pair<int, hvdrun::UniqueFd>> silent_stranger(MemoryStore& store, std::string key) {
  return std::async(std::launch::async, [&store, key = std::move(key)] {
    REQUIRE(store.wait_for({key}, 10s).empty());
    const std::string v = *store.get(key);
    const auto sp = v.find(' ');
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    REQUIRE(::getaddrinfo(v.substr(0, sp).c_str(),
                          v.substr(sp + 1, v.find(' ', sp + 1) - sp - 1).c_str(), &hints,
                          &res) == 0);
    hvdrun::UniqueFd fd(::socket(res->ai_family, SOCK_STREAM, 0));
    const int rc = ::connect(fd.get(), res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    return std::make_pair(rc, std::move(fd));
  });
}

}  // namespace

TEST_CASE("frame mesh: allreduce, broadcast, allgather and alltoallv agree with the arithmetic",
          "[frames]") {
  for (int size : {2, 3, 4}) {
    MemoryStore store;
    const auto results = as_ranks(size, [&store, size](int rank) {
      FrameComm comm(store, "t/frames/" + std::to_string(size), rank, size, ip_of(rank), kSecret,
                     20s, 20s);
      std::string failures;
      const auto expect = [&](bool ok, const std::string& what) {
        if (!ok) failures += what + "; ";
      };
      // Sums across several frames, with a count that does not divide evenly.
      for (std::size_t count : {1u, 5u, 1000u, 300001u, 3000001u}) {
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank + 1) * (i % 7);
        comm.allreduce(v.data(), count, DataType::kFloat32, ReduceOp::kSum);
        const float ranks_sum = static_cast<float>(size) * static_cast<float>(size + 1) / 2.0F;
        bool ok = true;
        for (std::size_t i = 0; i < count; ++i) ok = ok && v[i] == ranks_sum * (i % 7);
        expect(ok, "allreduce of " + std::to_string(count));
      }
      std::vector<std::int64_t> m = {rank, -rank};
      comm.allreduce(m.data(), 2, DataType::kInt64, ReduceOp::kMax);
      expect(m[0] == size - 1 && m[1] == 0, "max");
      std::vector<double> a = {static_cast<double>(rank)};
      comm.allreduce(a.data(), 1, DataType::kFloat64, ReduceOp::kAverage);
      expect(a[0] == (size - 1) / 2.0, "average");

      std::vector<char> b(600000, rank == size - 1 ? 'r' : '.');
      comm.broadcast(b.data(), b.size(), size - 1);
      expect(std::all_of(b.begin(), b.end(), [](char c) { return c == 'r'; }), "broadcast");

      std::vector<int> mine(3, rank), all(3 * static_cast<std::size_t>(size), -1);
      comm.allgather(mine.data(), all.data(), mine.size() * sizeof(int));
      for (int r = 0; r < size; ++r)
        expect(all[3 * static_cast<std::size_t>(r)] == r &&
                   all[3 * static_cast<std::size_t>(r) + 2] == r,
               "allgather block " + std::to_string(r));

      // Rank i sends (i + j) % 3 bytes of value 10 i + j to rank j.
      std::vector<std::size_t> sb, rb;
      std::vector<char> out, in;
      for (int j = 0; j < size; ++j) {
        sb.push_back(static_cast<std::size_t>((rank + j) % 3));
        rb.push_back(static_cast<std::size_t>((j + rank) % 3));
        out.insert(out.end(), sb.back(), static_cast<char>(10 * rank + j));
      }
      in.assign(std::accumulate(rb.begin(), rb.end(), std::size_t{0}), 0);
      comm.alltoallv(out.data(), sb, in.data(), rb);
      std::size_t at = 0;
      for (int j = 0; j < size; ++j)
        for (std::size_t k = 0; k < rb[static_cast<std::size_t>(j)]; ++k, ++at)
          expect(in[at] == static_cast<char>(10 * j + rank), "alltoallv from " + std::to_string(j));
      expect(comm.connected_pairs() == size - 1, "pairs");
      return failures;
    });
    for (int r = 0; r < size; ++r) {
      INFO(size << " ranks, rank " << r);
      CHECK(results[static_cast<std::size_t>(r)].empty());
    }
  }
}

TEST_CASE(
    "frame mesh: a peer with another secret is refused, and a silent stranger holds up nothing",
    "[frames][security]") {
  MemoryStore store;
  // A stranger connects to rank 0's port as soon as it is published and says nothing.
  auto stranger = silent_stranger(store, "t/frames/s/addr/0");
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = as_ranks(3, [&store](int rank) {
    const std::string secret = rank == 2 ? std::string(64, 'x') : kSecret;
    FrameComm comm(store, "t/frames/s", rank, 3, ip_of(rank), secret, 5s, 5s);
    return error_of([&] { comm.connect(hvdrun::runtime::Topology::kFullMesh, 0); });
  });
  const auto held = stranger.get();
  CHECK(held.first == 0);
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1] << "\nrank 2: " << errors[2]);
  // Rank 2 dials 0 and 1 with the wrong secret: both refuse its hello, so it hears no proof.
  CHECK_THAT(errors[2], Catch::Contains("rank 2 connecting to rank 0"));
  CHECK_THAT(errors[0], Catch::Contains("rank(s) 2 did not connect and prove the job secret"));
  CHECK_THAT(errors[1], Catch::Contains("rank(s) 2 did not connect and prove the job secret"));
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
}

TEST_CASE("frame mesh: the port's warnings go to stderr, never the program's own logger",
          "[frames][security]") {
  // In a training program spdlog's default logger is the program's (on its stdout).
  hvdrun::testing::CapturedLog program("program");
  hvdrun::testing::CapturedStderr err;
  MemoryStore store;
  auto stranger = silent_stranger(store, "t/frames/w/addr/0");
  auto rank0 = std::async(std::launch::async, [&store] {
    FrameComm comm(store, "t/frames/w", 0, 2, ip_of(0), kSecret, 10s, 10s);
    return error_of([&] { comm.connect(hvdrun::runtime::Topology::kFullMesh, 0); });
  });
  auto [rc, fd] = stranger.get();
  REQUIRE(rc == 0);
  const std::string garbage(256, 'x');  // longer than a hello, and not one
  REQUIRE(::send(fd.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(garbage.size()));
  // Rank 0 refuses the hello and closes: the stranger reads the end (or a reset).
  pollfd p{fd.get(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  char c = 0;
  CHECK(::recv(fd.get(), &c, 1, 0) <= 0);
  const std::string rank1 = error_of([&store] {
    FrameComm comm(store, "t/frames/w", 1, 2, ip_of(1), kSecret, 10s, 10s);
    comm.connect(hvdrun::runtime::Topology::kFullMesh, 0);
  });
  CHECK(rank1.empty());
  CHECK(rank0.get().empty());
  INFO("program's logger: " << program.text() << "\nstderr: " << err.text());
  CHECK(program.text().empty());
  CHECK_THAT(err.text(),
             Catch::Contains("frames: a connection from") && Catch::Contains("to rank 0"));
}

TEST_CASE("frame mesh: a frame written into a connection is rejected, never reduced",
          "[frames][security]") {
  struct Case {
    const char* name;
    std::vector<unsigned char> bytes;
    std::size_t count;  // floats in the allreduce that meets the bytes
  };
  // A well-formed header for a 16-byte frame (what the peer's next frame in a 4-float
  // allreduce looks like), then a payload and a tag the writer had to guess; and plain
  // garbage.
  std::vector<unsigned char> forged = {'H', 'V', 'F', 'R', 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16 + 16; ++i) forged.push_back(0x41);
  // The large allreduce sends on a second thread while the first receives (2 MiB steps).
  const Case cases[] = {{"forged frame", forged, 4},
                        {"garbage", std::vector<unsigned char>(100, 0xff), 4},
                        {"forged frame, large allreduce", forged, 1u << 20}};
  for (const auto& c : cases) {
    MemoryStore store;
    const std::string prefix = std::string("t/frames/inj/") + c.name;
    const auto results = as_ranks(2, [&](int rank) {
      FrameComm comm(store, prefix, rank, 2, ip_of(rank), kSecret, 10s, 10s);
      std::vector<float> v(4, 1.0F);
      comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);  // connects
      if (rank == 0) {
        // Bytes that rank 1 reads as if rank 0 had sent them, ahead of rank 0's own frames.
        const int fd = comm.socket_for_testing(1);
        REQUIRE(::send(fd, c.bytes.data(), c.bytes.size(), MSG_NOSIGNAL) ==
                static_cast<ssize_t>(c.bytes.size()));
      }
      std::vector<float> w(c.count, 2.0F);
      const std::string error =
          error_of([&] { comm.allreduce(w.data(), w.size(), DataType::kFloat32, ReduceOp::kSum); });
      const bool right = std::all_of(w.begin(), w.end(), [](float x) { return x == 4.0F; });
      // After a rejected frame the communicator stays failed with the reason.
      const std::string again =
          error_of([&] { comm.allreduce(w.data(), w.size(), DataType::kFloat32, ReduceOp::kSum); });
      return std::make_tuple(v, error, again, right);
    });
    INFO(c.name << ": rank 0: " << std::get<1>(results[0])
                << "\nrank 1: " << std::get<1>(results[1]));
    CHECK(std::get<0>(results[1]) == std::vector<float>(4, 2.0F));  // the honest call worked
    CHECK_THAT(std::get<1>(results[1]),
               Catch::Contains("rank 1 rejected frame 0 of a message from rank 0") &&
                   Catch::Contains("no data from the frame was used"));
    CHECK_THAT(std::get<2>(results[1]),
               Catch::Contains("an earlier collective across hosts failed"));
    // Rank 0 gets no value (the ring: rank 1 stopped before its part of the allgather),
    // or, where rank 1 sent its whole message before it read the bytes (a small
    // allreduce's one exchange), the right one: never a value built from the bytes.
    CHECK((!std::get<1>(results[0]).empty() || std::get<3>(results[0])));
    if (c.count > 1000) CHECK_FALSE(std::get<1>(results[0]).empty());
  }
}

namespace {

// A relay standing between rank 1 and rank 0 (whose address rank 1 reads from the store):
// it forwards every byte both ways, except that on the way from rank 0 to rank 1 it sends
// rank 0's first frame twice (a replay) or flips one bit of its payload (a change).
class Relay {
 public:
  enum class Mode { kReplay, kFlip };
  Relay(Mode mode, const std::string& host, const std::string& port) : mode_(mode) {
    target_ = hvdrun::testing::resolve_v4(host, port);
    listener_ = hvdrun::testing::listen_on_127_0_0_9(4, port_);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() { thread_.join(); }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  int port() const { return port_; }

 private:
  void run() {
    hvdrun::UniqueFd near(::accept(listener_.get(), nullptr, nullptr));      // rank 1
    hvdrun::UniqueFd far(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));  // rank 0
    if (::connect(far.get(), reinterpret_cast<sockaddr*>(&target_), sizeof(target_)) != 0) return;
    // From rank 0: its 32-byte proof, then frames; the first is 16 + 16 + 16 bytes (a
    // 4-float allreduce is small: the whole message in one exchange).
    constexpr std::size_t kFirst = 32, kFrame = 48;
    std::size_t from_far = 0;
    std::vector<unsigned char> frame;
    std::array<unsigned char, 65536> buf{};
    for (;;) {
      pollfd fds[2] = {{near.get(), POLLIN, 0}, {far.get(), POLLIN, 0}};
      if (::poll(fds, 2, 20000) <= 0) return;
      if (fds[0].revents & (POLLIN | POLLHUP)) {
        const ssize_t r = ::read(near.get(), buf.data(), buf.size());
        if (r <= 0 || ::send(far.get(), buf.data(), static_cast<std::size_t>(r), MSG_NOSIGNAL) != r)
          return;
      }
      if (fds[1].revents & (POLLIN | POLLHUP)) {
        const ssize_t r = ::read(far.get(), buf.data(), buf.size());
        if (r <= 0) return;
        for (ssize_t i = 0; i < r; ++i, ++from_far) {
          unsigned char c = buf[static_cast<std::size_t>(i)];
          if (mode_ == Mode::kFlip && from_far == kFirst + 16 + 3) c ^= 0x04;
          if (::send(near.get(), &c, 1, MSG_NOSIGNAL) != 1) return;
          if (from_far >= kFirst && from_far < kFirst + kFrame) frame.push_back(c);
          if (mode_ == Mode::kReplay && from_far + 1 == kFirst + kFrame &&
              ::send(near.get(), frame.data(), frame.size(), MSG_NOSIGNAL) !=
                  static_cast<ssize_t>(frame.size()))
            return;
        }
      }
    }
  }

  Mode mode_;
  sockaddr_in target_{};
  hvdrun::UniqueFd listener_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("frame mesh: a frame replayed or changed in transit is rejected", "[frames][security]") {
  for (auto mode : {Relay::Mode::kReplay, Relay::Mode::kFlip}) {
    const bool replay = mode == Relay::Mode::kReplay;
    MemoryStore store;
    const std::string prefix = std::string("t/frames/relay/") + (replay ? "replay" : "flip");
    auto rank0 = std::async(std::launch::async, [&] {
      FrameComm comm(store, prefix, 0, 2, ip_of(0), kSecret, 10s, 10s);
      std::vector<float> v(4, 1.0F);
      return error_of([&] {
        for (int call = 0; call < 2; ++call)
          comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      });
    });
    // Rank 1 is sent to the relay instead of rank 0 (same nonce, other address).
    REQUIRE(store.wait_for({prefix + "/addr/0"}, 10s).empty());
    const std::string real = *store.get(prefix + "/addr/0");
    const auto sp1 = real.find(' '), sp2 = real.rfind(' ');
    auto relay =
        std::make_unique<Relay>(mode, real.substr(0, sp1), real.substr(sp1 + 1, sp2 - sp1 - 1));
    store.set(prefix + "/addr/0", "127.0.0.9 " + std::to_string(relay->port()) + real.substr(sp2));
    std::vector<float> v(4, 1.0F);
    std::string e1;
    {
      FrameComm comm(store, prefix, 1, 2, ip_of(1), kSecret, 10s, 10s);
      // Two calls: the replayed frame arrives after the first call's one message, as the
      // first frame of the second.
      e1 = error_of([&] {
        for (int call = 0; call < 2; ++call)
          comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      });
    }
    const std::string e0 = rank0.get();
    relay.reset();
    INFO((replay ? "replay" : "flip") << ": rank 0: " << e0 << "\nrank 1: " << e1);
    CHECK_THAT(e1, Catch::Contains("rank 1 rejected frame 0 of a message from rank 0: its MAC "
                                   "does not check (sequence number " +
                                   std::string(replay ? "1" : "0") + ")"));
    // Rank 0 may finish its calls (nothing it received was touched: rank 1 may send its
    // frame before it reads the replay), but never its second after a change: rank 1
    // stopped at its first call.
    if (!replay) CHECK_FALSE(e0.empty());
  }
}

TEST_CASE("frame mesh: pairs are connected when a collective first needs them", "[frames]") {
  constexpr int kSize = 8;
  MemoryStore store;
  // A stranger connects to rank 0's port as soon as it is published and says nothing.
  auto stranger = silent_stranger(store, "t/frames/lazy/addr/0");
  const auto t0 = std::chrono::steady_clock::now();
  const auto pairs = as_ranks(kSize, [&store](int rank) {
    FrameComm comm(store, "t/frames/lazy", rank, kSize, ip_of(rank), kSecret, 20s, 20s);
    std::vector<int> seen;
    seen.push_back(comm.connected_pairs());
    // Larger than the small-message path: the ring, which needs the two neighbours only.
    std::vector<float> v(100000, static_cast<float>(rank));
    comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    seen.push_back(v[99999] == 28.0F ? comm.connected_pairs() : -1);
    // Again: nothing new to connect.
    comm.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kMax);
    seen.push_back(v[0] == 28.0F ? comm.connected_pairs() : -1);
    // Broadcast from rank 3 down a binomial tree: its edges join the ring's.
    std::vector<char> b(1000, rank == 3 ? 'b' : '.');
    comm.broadcast(b.data(), b.size(), 3);
    seen.push_back(std::all_of(b.begin(), b.end(), [](char c) { return c == 'b'; })
                       ? comm.connected_pairs()
                       : -1);
    // An alltoall needs every pair.
    std::vector<std::size_t> sizes(kSize, 4);
    std::vector<int> out(kSize, rank), in(kSize, -1);
    comm.alltoallv(out.data(), sizes, in.data(), sizes);
    bool ok = true;
    for (int j = 0; j < kSize; ++j) ok = ok && in[static_cast<std::size_t>(j)] == j;
    seen.push_back(ok ? comm.connected_pairs() : -1);
    return seen;
  });
  const auto held = stranger.get();
  CHECK(held.first == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < 15s);
  const auto total = [&](std::size_t at) {
    int n = 0;
    for (const auto& s : pairs) n += s[at];
    return n / 2;  // each pair counted at both ends
  };
  for (int r = 0; r < kSize; ++r) {
    INFO("rank " << r);
    const auto& s = pairs[static_cast<std::size_t>(r)];
    CHECK(s[0] == 0);
    CHECK(s[1] == 2);
    CHECK(s[2] == 2);
    CHECK(s[3] >= 2);
    CHECK(s[4] == kSize - 1);
  }
  CHECK(total(1) == kSize);
  // The tree from rank 3 over 8 ranks has the edges 3-4, 3-5, 3-7, 5-6, 7-0, 7-1, 1-2
  // (relative ranks 0-1, 0-2, 0-4, 2-3, 4-5, 4-6, 6-7); four are ring pairs, 3 are new.
  CHECK(total(3) == kSize + 3);
  CHECK(total(4) == kSize * (kSize - 1) / 2);
}

namespace {

// One value of `dtype` from a double (exact for the small values used below) and back.
void put_value(DataType dtype, unsigned char* p, double v) {
  using namespace hvdrun::runtime;
  const auto put = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (dtype) {
    case DataType::kInt32:
      return put(static_cast<std::int32_t>(v));
    case DataType::kInt64:
      return put(static_cast<std::int64_t>(v));
    case DataType::kFloat32:
      return put(static_cast<float>(v));
    case DataType::kFloat64:
      return put(v);
    case DataType::kUInt8:
      return put(static_cast<std::uint8_t>(v));
    case DataType::kFloat16:
      return put(to_half(static_cast<float>(v)).bits);
    case DataType::kBFloat16:
      return put(to_bfloat16(static_cast<float>(v)).bits);
  }
}

double get_value(DataType dtype, const unsigned char* p) {
  using namespace hvdrun::runtime;
  const auto get = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (dtype) {
    case DataType::kInt32:
      return get(std::int32_t{});
    case DataType::kInt64:
      return static_cast<double>(get(std::int64_t{}));
    case DataType::kFloat32:
      return get(float{});
    case DataType::kFloat64:
      return get(double{});
    case DataType::kUInt8:
      return get(std::uint8_t{});
    case DataType::kFloat16:
      return to_float(Half{get(std::uint16_t{})});
    case DataType::kBFloat16:
      return to_float(BFloat16{get(std::uint16_t{})});
  }
  return 0;
}

}  // namespace

TEST_CASE(
    "frame mesh: small allreduces (recursive doubling) over 1 to 9 ranks, every dtype "
    "and op",
    "[frames]") {
  const DataType dtypes[] = {DataType::kInt32,   DataType::kInt64, DataType::kFloat32,
                             DataType::kFloat64, DataType::kUInt8, DataType::kFloat16,
                             DataType::kBFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kProduct, ReduceOp::kMin,
                          ReduceOp::kMax};
  // Values exact in every dtype: sums stay under 256, the product is 2.
  const auto value = [](ReduceOp op, int rank, int size, std::size_t i) -> double {
    switch (op) {
      case ReduceOp::kProduct:
        return rank == static_cast<int>(i % static_cast<std::size_t>(size)) ? 2 : 1;
      case ReduceOp::kMin:
      case ReduceOp::kMax:
        return static_cast<double>((static_cast<std::size_t>(rank) * 7 + i) % 11);
      default:
        return static_cast<double>((rank + 1) * static_cast<int>(i % 3));
    }
  };
  for (int size = 1; size <= 9; ++size) {
    MemoryStore store;
    const auto results = as_ranks(size, [&](int rank) {
      FrameComm comm(store, "t/frames/small/" + std::to_string(size), rank, size, ip_of(rank),
                     kSecret, 20s, 20s);
      std::vector<std::string> out;
      for (DataType dtype : dtypes)
        for (ReduceOp op : ops)
          for (std::size_t count : {1u, 7u, 1001u}) {
            const std::size_t es = hvdrun::dtype_size(dtype);
            std::string buf(count * es, '\0');
            auto* p = reinterpret_cast<unsigned char*>(buf.data());
            for (std::size_t i = 0; i < count; ++i)
              put_value(dtype, p + i * es, value(op, rank, size, i));
            comm.allreduce(buf.data(), count, dtype, op);
            out.push_back(buf);
          }
      // Order-sensitive float sums: every rank must still end with the same bits.
      std::vector<float> f(333);
      for (std::size_t i = 0; i < f.size(); ++i)
        f[i] =
            (rank % 2 ? 1e7F : 1e-3F) * static_cast<float>((rank * 31 + static_cast<int>(i)) % 17);
      comm.allreduce(f.data(), f.size(), DataType::kFloat32, ReduceOp::kSum);
      out.emplace_back(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
      return out;
    });
    std::size_t at = 0;
    for (DataType dtype : dtypes)
      for (ReduceOp op : ops)
        for (std::size_t count : {1u, 7u, 1001u}) {
          INFO(size << " ranks, dtype " << static_cast<int>(dtype) << ", op "
                    << static_cast<int>(op) << ", count " << count);
          const std::size_t es = hvdrun::dtype_size(dtype);
          bool same = true, right = true;
          for (int r = 1; r < size; ++r)
            same = same && results[static_cast<std::size_t>(r)][at] == results[0][at];
          const auto* p = reinterpret_cast<const unsigned char*>(results[0][at].data());
          for (std::size_t i = 0; i < count; ++i) {
            double want = op == ReduceOp::kProduct ? 1
                          : op == ReduceOp::kMin   ? 1e9
                          : op == ReduceOp::kMax   ? -1e9
                                                   : 0;
            for (int r = 0; r < size; ++r) {
              const double v = value(op, r, size, i);
              want = op == ReduceOp::kProduct ? want * v
                     : op == ReduceOp::kMin   ? std::min(want, v)
                     : op == ReduceOp::kMax   ? std::max(want, v)
                                              : want + v;
            }
            const double got = get_value(dtype, p + i * es);
            if (op == ReduceOp::kAverage) {  // the sum divided in the dtype, as the ring does
              std::array<unsigned char, 8> w{};
              put_value(dtype, w.data(), want);
              hvdrun::runtime::divide_by(w.data(), 1, dtype, size);
              want = get_value(dtype, w.data());
            }
            right = right && got == want;
          }
          CHECK(same);
          CHECK(right);
          ++at;
        }
    for (int r = 1; r < size; ++r) {
      INFO(size << " ranks: float sums on rank " << r);
      CHECK(results[static_cast<std::size_t>(r)][at] == results[0][at]);
    }
  }
}
