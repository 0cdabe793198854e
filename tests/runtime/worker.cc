// A rank program for the runtime tests: linked against libhvdrun.so like a user's
// program, started N times by job_harness with the HVDRUN_* environment. The scenario
// (argv[1]) says what to check; the exit code says whether it held (0 = yes).
#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "hvdrun/hvdrun_c.h"
#include "tests/runtime/collective_checks.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun_test::fail;

namespace {

void check_all_allreduce() {
  hvdrun_test::check_every_dtype(
      [](const void* send, void* out, std::size_t count, DataType dt, ReduceOp op) {
        if (hvdrun_allreduce(send, out, count, static_cast<hvdrun_dtype>(dt),
                             static_cast<hvdrun_op>(op)) != 0)
          return std::string(hvdrun_last_error());
        return std::string();
      },
      {1, 7, 40000});
}

// Above the algorithm cache's 16 MiB limit collectives run on the caller's buffer.
void check_large() {
  const int n = hvdrun::size(), r = hvdrun::rank();
  const std::size_t count = 4500000;  // 18 MB of float32
  std::vector<float> buf(count);
  for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((r + i) % 5);
  hvdrun::allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
  for (std::size_t i = 0; i < count; i += 997) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += static_cast<float>((q + i) % 5);
    if (buf[i] != want) {
      fail("large allreduce wrong at " + std::to_string(i));
      break;
    }
  }
  for (std::size_t i = 0; i < count; ++i) buf[i] = r == 0 ? static_cast<float>(i % 1000) : -1.0f;
  hvdrun::broadcast(buf.data(), count, DataType::kFloat32, 0);
  for (std::size_t i = 0; i < count; i += 991)
    if (buf[i] != static_cast<float>(i % 1000)) {
      fail("large broadcast wrong at " + std::to_string(i));
      break;
    }
}

void check_broadcast_allgather() {
  hvdrun_test::check_broadcast(
      [](void* buf, std::size_t count, DataType dt, int root) {
        if (hvdrun_broadcast(buf, count, static_cast<hvdrun_dtype>(dt), root) != 0)
          return std::string(hvdrun_last_error());
        return std::string();
      },
      1000);
  for (std::size_t count : {std::size_t{3}, std::size_t{50000}})
    hvdrun_test::check_allgather(
        [](const void* send, void* recv, std::size_t n, DataType dt) {
          if (hvdrun_allgather(send, recv, n, static_cast<hvdrun_dtype>(dt)) != 0)
            return std::string(hvdrun_last_error());
          return std::string();
        },
        count);
}

hvdrun_test::AllreduceFn cpp_allreduce() {
  return [](const void* send, void* out, std::size_t count, DataType dt, ReduceOp op) {
    try {
      hvdrun::allreduce(send, out, count, dt, op);
    } catch (const hvdrun::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
}

// The host path's matrix: every dtype and op, in place and not, at 1, 7 and 4097
// elements; `big` elements (3,000,001 by default: several pipeline steps, a ragged last
// one) for float32, float16 and bfloat16 up to 4 ranks; broadcast and allgather at the
// same sizes.
void check_matrix(std::size_t big) {
  auto ar = cpp_allreduce();
  hvdrun_test::check_every_dtype(ar, {1, 7, 4097});
  if (hvdrun::size() <= 4) {
    hvdrun_test::check_allreduce<float>(ar, DataType::kFloat32, "float32", big);
    hvdrun_test::check_allreduce<hvdrun_test::Half>(ar, DataType::kFloat16, "float16", big);
    hvdrun_test::check_allreduce<hvdrun_test::BFloat16>(ar, DataType::kBFloat16, "bfloat16", big);
  } else {
    hvdrun_test::check_allreduce<float>(ar, DataType::kFloat32, "float32", big);
  }
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{4097}, big}) {
    hvdrun_test::check_broadcast(
        [](void* buf, std::size_t n, DataType dt, int root) {
          try {
            hvdrun::broadcast(buf, n, dt, root);
          } catch (const hvdrun::Error& e) {
            return std::string(e.what());
          }
          return std::string();
        },
        count);
    hvdrun_test::check_allgather(
        [](const void* send, void* recv, std::size_t n, DataType dt) {
          try {
            hvdrun::allgather(send, recv, n, dt);
          } catch (const hvdrun::Error& e) {
            return std::string(e.what());
          }
          return std::string();
        },
        count);
  }
  // In-place allgather: the own block already sits in the output.
  const int n = hvdrun::size(), r = hvdrun::rank();
  std::vector<std::int64_t> all(static_cast<std::size_t>(n) * 4099, -1);
  for (std::size_t i = 0; i < 4099; ++i)
    all[static_cast<std::size_t>(r) * 4099 + i] = r * 7 + static_cast<std::int64_t>(i);
  hvdrun::allgather(all.data() + static_cast<std::size_t>(r) * 4099, all.data(), 4099,
                    DataType::kInt64);
  for (int q = 0; q < n; ++q)
    if (all[static_cast<std::size_t>(q) * 4099 + 4098] != q * 7 + 4098)
      fail("in-place allgather wrong for rank " + std::to_string(q));
}

// Rank 1 dies (SIGKILL) while every rank is inside a stream of collectives: large ones
// (mid-pipeline) or small ones. The others must fail, naming rank 1, long before
// HVDRUN_OP_TIMEOUT; exit 5 says they did.
int kill_mid(const std::string& kind) {
  const bool large = kind == "large";
  const std::size_t count = large ? (8u << 20) : 3;
  std::vector<float> buf(count, 1.0f);
  if (hvdrun::rank() == 1)
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      ::raise(SIGKILL);
    }).detach();
  for (int i = 0; i < 1000000; ++i) {
    try {
      hvdrun::allreduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kMax);
    } catch (const hvdrun::Error& e) {
      std::fprintf(stderr, "allreduce %d failed: %s\n", i, e.what());
      return 5;
    }
  }
  std::fprintf(stderr, "no collective failed\n");
  return 1;
}

struct TcpSocket {
  int state = 0;
  int local_port = 0;
  int remote_port = 0;
  std::string local_address;  ///< as /proc/net/tcp writes it ("0100007F" for 127.0.0.1)
};

// Reads /proc/net/tcp{,6}: inode -> socket.
std::map<std::string, TcpSocket> tcp_sockets() {
  auto port_of = [](const std::string& addr) {
    return static_cast<int>(std::strtol(addr.substr(addr.find(':') + 1).c_str(), nullptr, 16));
  };
  std::map<std::string, TcpSocket> out;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      in >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      out[inode] = {static_cast<int>(std::strtol(state.c_str(), nullptr, 16)), port_of(local),
                    port_of(remote), local.substr(0, local.find(':'))};
    }
  }
  return out;
}

// After collectives of every kind and several sizes, lists this rank's TCP sockets: on
// the shared-memory path the only one is the rendezvous connection, and the segment is
// a memfd mapping (nothing in /dev/shm). With "expect-tcp" (HVDRUN_HOST_PATH=gloo) the
// check must see the Gloo connections instead, which shows that it can.
// With "across-hosts" only the host leaders (local rank 0) may hold TCP connections (the
// leaders' frame mesh); the others none. With HVDRUN_CHECKIN=host a rank other than local
// rank 0 has no rendezvous connection either (it checked in through its leader).
void check_sockets(const std::string& mode) {
  const bool expect_tcp = mode == "expect-tcp";
  const bool leader_tcp = mode == "across-hosts" && hvdrun::local_rank() == 0;
  const char* checkin = std::getenv("HVDRUN_CHECKIN");
  const int want_rendezvous = checkin != nullptr && std::string(checkin) == "host" &&
                                      hvdrun::local_size() > 1 && hvdrun::local_rank() != 0
                                  ? 0
                                  : 1;
  std::vector<float> v(1 << 20, 1.0f);
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, v.size()}) {
    hvdrun::allreduce(v.data(), v.data(), n, DataType::kFloat32, ReduceOp::kSum);
    hvdrun::broadcast(v.data(), n, DataType::kFloat32, hvdrun::size() - 1);
  }
  std::vector<float> all(v.size() * static_cast<std::size_t>(hvdrun::size()));
  hvdrun::allgather(v.data(), all.data(), v.size(), DataType::kFloat32);
  hvdrun::barrier();
  const int rendezvous_port =
      static_cast<int>(std::strtol(std::getenv("HVDRUN_RENDEZVOUS_PORT"), nullptr, 10));
  auto table = tcp_sockets();
  int other = 0, to_rendezvous = 0;
  std::string seen;
  // HVDRUN_TEST_MESH_ADDR (IPv4): every socket of the leaders' mesh is on that address.
  std::string mesh_hex;
  if (const char* a = std::getenv("HVDRUN_TEST_MESH_ADDR")) {
    in_addr in{};
    if (::inet_pton(AF_INET, a, &in) != 1) fail(std::string("bad HVDRUN_TEST_MESH_ADDR ") + a);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08X", in.s_addr);
    mesh_hex = hex;
  }
  int off_mesh = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      char target[256] = {};
      std::string link = std::string("/proc/self/fd/") + e->d_name;
      ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
      std::string t(target, n > 0 ? static_cast<std::size_t>(n) : 0);
      if (t.rfind("socket:[", 0) != 0) continue;
      auto it = table.find(t.substr(8, t.size() - 9));
      if (it == table.end()) continue;  // not TCP (the Unix socket is closed by now anyway)
      const auto& sock = it->second;
      // The test's rendezvous server runs in the process that forked the ranks: its
      // listening socket, and the connections it accepted from ranks started earlier,
      // are inherited, not opened by this rank.
      if (sock.local_port == rendezvous_port) continue;
      if (sock.state != 0x0A && sock.remote_port == rendezvous_port) {
        ++to_rendezvous;
      } else {
        ++other;
        seen += " state=" + std::to_string(sock.state) +
                "/local port=" + std::to_string(sock.local_port) +
                "/remote port=" + std::to_string(sock.remote_port) +
                "/local address=" + sock.local_address;
        if (!mesh_hex.empty() && sock.local_address != mesh_hex) ++off_mesh;
      }
    }
    ::closedir(d);
  }
  if (to_rendezvous != want_rendezvous)
    fail("expected " + std::to_string(want_rendezvous) + " rendezvous connection(s), saw " +
         std::to_string(to_rendezvous));
  if (expect_tcp && other == 0) fail("HVDRUN_HOST_PATH=gloo but no Gloo socket was seen");
  if (!mesh_hex.empty() && leader_tcp && (other == 0 || off_mesh != 0))
    fail("expected the leaders' mesh on " + mesh_hex + ", saw:" + seen);
  if (!expect_tcp && !leader_tcp && other != 0)
    fail("TCP sockets besides the rendezvous connection:" + seen);
  std::ifstream maps("/proc/self/maps");
  std::string m((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  const bool mapped = m.find("/memfd:hvdrun-shm") != std::string::npos;
  if (!expect_tcp && hvdrun::local_size() > 1 && !mapped) fail("no memfd segment mapped");
  std::printf("rank %d: tcp sockets: rendezvous %d, other %d; memfd segment %s\n", hvdrun::rank(),
              to_rendezvous, other, mapped ? "mapped" : "absent");
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "collectives";
  if (hvdrun_init() != 0) {
    std::fprintf(stderr, "init failed: %s\n", hvdrun_last_error());
    return 3;
  }
  if (scenario == "barrier") {
    for (int i = 0; i < 3; ++i)
      if (hvdrun_barrier() != 0) {
        std::fprintf(stderr, "barrier failed: %s\n", hvdrun_last_error());
        return 4;
      }
  } else if (scenario == "collectives") {
    if (hvdrun_rank() < 0 || hvdrun_size() < 1 || hvdrun_local_rank() < 0)
      fail("rank/size queries failed");
    check_all_allreduce();
    check_broadcast_allgather();
    if (hvdrun::size() <= 4) check_large();
    if (hvdrun_barrier() != 0) fail(std::string("barrier: ") + hvdrun_last_error());
  } else if (scenario == "matrix") {
    check_matrix(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 3000001);
  } else if (scenario == "kill-mid") {
    return kill_mid(argc > 2 ? argv[2] : "large");
  } else if (scenario == "pidfds") {
    // How many processes this rank watches through a pidfd (the host's segment).
    int pidfds = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      while (dirent* e = ::readdir(d)) {
        char target[64] = {};
        std::string link = std::string("/proc/self/fd/") + e->d_name;
        if (::readlink(link.c_str(), target, sizeof(target) - 1) > 0 &&
            std::string(target) == "anon_inode:[pidfd]")
          ++pidfds;
      }
      ::closedir(d);
    }
    std::fprintf(stderr, "local rank %d: pidfds %d\n", hvdrun::local_rank(), pidfds);
    if (hvdrun_barrier() != 0) fail(std::string("barrier: ") + hvdrun_last_error());
  } else if (scenario == "sockets") {
    check_sockets(argc > 2 ? argv[2] : "");
  } else if (scenario == "stop-after-init") {
    // Rank 1 hangs (stops itself) after init; the others must not wait for ever.
    if (hvdrun::rank() == 1) ::raise(SIGSTOP);
    if (hvdrun_barrier() != 0) {
      std::fprintf(stderr, "barrier failed: %s\n", hvdrun_last_error());
      return 4;
    }
  } else if (scenario == "fail-before-collective") {
    // After one allreduce, rank argv[2] exits 5 where the others enter a second one; they
    // fail because it is gone (exit 1). With argv[3] (milliseconds) it first leaves the job,
    // as a Python rank's exit does, and exits that much later, so the others may fail before
    // it exits. The launcher must blame it, not one of them.
    const int me = hvdrun::rank();
    int warm = 1;  // one collective first: the pairs between hosts are connected
    if (hvdrun_allreduce(&warm, &warm, 1, HVDRUN_INT32, HVDRUN_SUM) != 0) return 3;
    if (me == (argc > 2 ? std::strtol(argv[2], nullptr, 10) : 1)) {
      if (argc > 3) {
        hvdrun_leave();
        std::this_thread::sleep_for(std::chrono::milliseconds(std::strtol(argv[3], nullptr, 10)));
      }
      std::fprintf(stderr, "rank %d: failing with exit code 5\n", me);
      std::fflush(stderr);
      std::_Exit(5);
    }
    int x = 1;
    if (hvdrun_allreduce(&x, &x, 1, HVDRUN_INT32, HVDRUN_SUM) == 0) {
      std::fprintf(stderr, "allreduce succeeded without the failed rank\n");
      return 2;
    }
    std::fprintf(stderr, "allreduce failed: %s\n", hvdrun_last_error());
    return 1;
  } else if (scenario == "exit-after-init") {
    // Leaves without taking part in the next collective.
    if (hvdrun::rank() == 1) return 0;
    int x = 1;
    if (hvdrun_allreduce(&x, &x, 1, HVDRUN_INT32, HVDRUN_SUM) == 0) {
      std::fprintf(stderr, "allreduce succeeded without rank 1\n");
      return 1;
    }
    std::fprintf(stderr, "allreduce failed: %s\n", hvdrun_last_error());
    return 5;
  }
  const int me = hvdrun_rank();
  hvdrun_shutdown();
  if (hvdrun_test::failures() != 0) {
    std::fprintf(stderr, "rank %d: %d checks failed\n", me, hvdrun_test::failures());
    return 1;
  }
  return 0;
}
