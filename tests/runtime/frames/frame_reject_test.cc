// What a rejected frame leaves behind in the host leaders' mesh (runtime/frames/frame_comm.h): a
// peer's connection carries a frame whose tag does not check, or one cut short, into a
// collective that receives straight into the caller's buffer (a broadcast, an in-place
// allgather, whose large steps send on a second thread); the call fails, and every byte of
// the destination is still what the caller put there. Threads on loopback stand in for the
// ranks; rank 0 writes the bad bytes into its socket instead of taking part.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/frames/frame_comm.h"

using hvdrun::rendezvous::MemoryStore;
using hvdrun::runtime::FrameComm;
using hvdrun::runtime::kFrameBytes;
using namespace std::chrono_literals;

namespace {

const std::string kSecret(64, 's');
constexpr unsigned char kSentinel = 0x5a;

// A frame as the mesh writes it (header: "HVFR", 4 reserved bytes, the payload's length
// in 8 bytes, little-endian), with `payload` bytes of 0x41 and a tag of 0x41s nobody
// computed; or, when `cut` is not 0, only the header and the first `cut` bytes.
std::vector<unsigned char> frame(std::size_t payload, std::size_t cut) {
  std::vector<unsigned char> f = {'H', 'V', 'F', 'R', 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) f.push_back(static_cast<unsigned char>(payload >> (8 * i)));
  f.insert(f.end(), cut != 0 ? cut : payload + 16, 0x41);
  return f;
}

// Writes all of `bytes` into the non-blocking socket `fd`, waiting for room.
bool write_all(int fd, const std::vector<unsigned char>& bytes) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t r = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (r > 0) {
      at += static_cast<std::size_t>(r);
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 10000) <= 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("frame mesh: a rejected frame leaves the destination exactly as it was",
          "[frames][security]") {
  struct Case {
    const char* name;
    bool allgather;     // else a broadcast from rank 0
    std::size_t bytes;  // of the message rank 1 receives from rank 0
    std::size_t cut;    // 0: a whole frame with a wrong tag; else header + this much, then EOF
    const char* error;  // what rank 1's call fails with
  };
  const char* const forged =
      "rank 1 rejected frame 0 of a message from rank 0: its MAC does "
      "not check (sequence number 0)";
  const char* const closed = "rank 0 closed its connection in the middle of a collective";
  const Case cases[] = {
      {"wrong tag, broadcast", false, 600000, 0, forged},
      // 2 MiB blocks: rank 1 sends its block on a second thread while it receives.
      {"wrong tag, in-place allgather", true, 2u << 20, 0, forged},
      {"frame cut short, broadcast", false, 600000, 100000, closed},
  };
  for (const auto& c : cases) {
    MemoryStore store;
    const std::string prefix = std::string("t/frames/reject/") + c.name;
    std::promise<void> finished;
    std::shared_future<void> rank1_done = finished.get_future().share();
    auto rank0 = std::async(std::launch::async, [&] {
      FrameComm comm(store, prefix, 0, 2, "127.0.0.1", kSecret, 10s, 10s);
      comm.connect(hvdrun::runtime::Topology::kRing, 0);
      const int fd = comm.socket_for_testing(1);
      const bool wrote = write_all(fd, frame(std::min(c.bytes, kFrameBytes), c.cut));
      if (c.cut != 0) ::shutdown(fd, SHUT_WR);
      // Rank 1's own sends stay unread in this socket: closing it now could reset the
      // connection before rank 1 has read the frame.
      rank1_done.wait_for(20s);
      return wrote;
    });
    std::string error;
    std::vector<unsigned char> got;
    {
      FrameComm comm(store, prefix, 1, 2, "127.0.0.2", kSecret, 10s, 10s);
      comm.connect(hvdrun::runtime::Topology::kRing, 0);
      std::vector<unsigned char> buf(c.bytes * (c.allgather ? 2 : 1), kSentinel);
      std::fill(buf.begin() + static_cast<std::ptrdiff_t>(c.bytes), buf.end(), 0x11);
      try {
        if (c.allgather)
          comm.allgather(buf.data() + c.bytes, buf.data(), c.bytes);
        else
          comm.broadcast(buf.data(), c.bytes, 0);
      } catch (const std::exception& e) {
        error = e.what();
      }
      got.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(c.bytes));
    }
    finished.set_value();
    INFO(c.name << ": rank 1: " << error);
    CHECK(rank0.get());
    CHECK_THAT(error, Catch::Contains(c.error));
    const auto changed =
        std::find_if(got.begin(), got.end(), [](unsigned char b) { return b != kSentinel; });
    INFO("first byte changed at offset " << (changed - got.begin()) << " of " << got.size());
    CHECK(changed == got.end());
  }
}
