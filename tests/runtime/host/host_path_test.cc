// The host-memory path (runtime/host/host_comm.*, runtime/shm/shm_comm.*): whole jobs of
// rank processes (tests/runtime/worker.cc) on one host and across simulated hosts
// (job_harness gives each block of ranks its own HVDRUN_HOSTNAME, so each block shares its
// own segment and the blocks' leaders talk over the frame mesh on loopback), the absence of
// TCP between the ranks of one host, and a rank killed inside a collective.
#include <dirent.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "common/fd.h"
#include "common/interfaces.h"
#include "runtime/reduce/reduce.h"
#include "runtime/reduce/shm_reduce.h"
#include "runtime/shm/shm_comm.h"
#include "runtime/world/world.h"
#include "tests/runtime/job_harness.h"
#include "tests/skip.h"

using namespace std::chrono_literals;
using hvdrun::test::JobSpec;
using hvdrun::test::run_job;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

// The matrix's large size: 3,000,001 elements; a tenth under the sanitizers (still
// several pipeline steps with a ragged last one), which slow the checks tenfold.
#ifdef HVDRUN_SANITIZED_BUILD
const std::string kBig = "300001";
#else
const std::string kBig = "3000001";
#endif

// Entries of /dev/shm: the segment is a memfd, so a job must never add one.
std::set<std::string> dev_shm() {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

std::string added(const std::set<std::string>& before, const std::set<std::string>& after) {
  std::string s;
  for (const auto& n : after)
    // hvdrun-errors-*: a launcher's error-file directory (launcher/agent/error_file.cc),
    // made by whatever job ctest runs beside this one, not by the host path.
    if (before.count(n) == 0 && n.find("hvdrun") != std::string::npos &&
        n.rfind("hvdrun-errors-", 0) != 0)
      s += " " + n;
  return s;
}

}  // namespace

TEST_CASE("host path: vectorised reductions give the scalar definitions' bits", "[runtime][shm]") {
  using hvdrun::DataType;
  using hvdrun::ReduceOp;
  using namespace hvdrun::runtime;
  if (!reduce_uses_avx2()) WARN("this CPU runs the baseline build; the AVX2 one is not checked");
  std::mt19937 rng(7);  // NOLINT(cert-msc51-cpp): the same values every run
  std::uniform_real_distribution<float> real(-70000.0f, 70000.0f);
  const std::size_t n = 1037;  // not a multiple of any vector width: the tails run too
  for (auto op :
       {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    auto ref = [op](float a, float b) {
      switch (op) {
        case ReduceOp::kProduct:
          return a * b;
        case ReduceOp::kMin:
          return std::min(a, b);
        case ReduceOp::kMax:
          return std::max(a, b);
        default:
          return a + b;
      }
    };
    std::vector<std::uint16_t> x(n), y(n);
    // float16: random bits (subnormals, infinities and NaNs included) except NaN, whose
    // payload may differ; bfloat16 the same.
    for (std::size_t i = 0; i < n; ++i) {
      do x[i] = static_cast<std::uint16_t>(rng());
      while ((x[i] & 0x7c00) == 0x7c00 && (x[i] & 0x3ff) != 0);
      do y[i] = static_cast<std::uint16_t>(rng());
      while ((y[i] & 0x7c00) == 0x7c00 && (y[i] & 0x3ff) != 0);
    }
    auto d = x;
    reduce_into(d.data(), y.data(), n, DataType::kFloat16, op);
    for (std::size_t i = 0; i < n; ++i) {
      const float want_f = ref(to_float(Half{x[i]}), to_float(Half{y[i]}));
      const std::uint16_t want = to_half(want_f).bits;
      if (std::isnan(want_f)) {
        CHECK(std::isnan(to_float(Half{d[i]})));
      } else if (d[i] != want) {
        FAIL_CHECK("float16 op " << static_cast<int>(op) << " element " << i << ": " << d[i]
                                 << " != " << want);
        break;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = to_bfloat16(real(rng)).bits;
      y[i] = to_bfloat16(real(rng)).bits;
    }
    d = x;
    reduce_into(d.data(), y.data(), n, DataType::kBFloat16, op);
    for (std::size_t i = 0; i < n; ++i)
      if (d[i] != to_bfloat16(ref(to_float(BFloat16{x[i]}), to_float(BFloat16{y[i]}))).bits) {
        FAIL_CHECK("bfloat16 op " << static_cast<int>(op) << " element " << i);
        break;
      }
    std::vector<float> fx(n), fy(n);
    for (std::size_t i = 0; i < n; ++i) {
      fx[i] = real(rng);
      fy[i] = real(rng);
    }
    auto fd = fx;
    reduce_into(fd.data(), fy.data(), n, DataType::kFloat32, op);
    for (std::size_t i = 0; i < n; ++i) {
      const float want = ref(fx[i], fy[i]);
      if (std::bit_cast<std::uint32_t>(fd[i]) != std::bit_cast<std::uint32_t>(want)) {
        FAIL_CHECK("float32 op " << static_cast<int>(op) << " element " << i);
        break;
      }
    }
    std::vector<std::uint8_t> bx(n), by(n);
    for (std::size_t i = 0; i < n; ++i) {
      bx[i] = static_cast<std::uint8_t>(rng());
      by[i] = static_cast<std::uint8_t>(rng());
    }
    auto bd = bx;
    reduce_into(bd.data(), by.data(), n, DataType::kUInt8, op);
    for (std::size_t i = 0; i < n; ++i) {
      const int a = bx[i], b = by[i];
      const int want = op == ReduceOp::kProduct ? (a * b) & 255
                       : op == ReduceOp::kMin   ? std::min(a, b)
                       : op == ReduceOp::kMax   ? std::max(a, b)
                                                : (a + b) & 255;
      if (bd[i] != want) {
        FAIL_CHECK("uint8 op " << static_cast<int>(op) << " element " << i);
        break;
      }
    }
  }
  // kAverage's division: integers truncate (also past 255 ranks for uint8), 16-bit floats
  // divide in float and round once.
  std::vector<std::uint8_t> b = {250, 7};
  divide_by(b.data(), 2, DataType::kUInt8, 300);
  CHECK(b == std::vector<std::uint8_t>{0, 0});
  std::vector<std::int32_t> i32 = {-7, 7};
  divide_by(i32.data(), 2, DataType::kInt32, 2);
  CHECK(i32 == std::vector<std::int32_t>{-3, 3});
  std::vector<std::uint16_t> h = {to_half(3.0f).bits};
  divide_by(h.data(), 1, DataType::kFloat16, 3);
  CHECK(to_float(Half{h[0]}) == 1.0f);
}

TEST_CASE("host path: the collectives matrix on one host", "[runtime][job][shm]") {
  auto np = GENERATE(1, 2, 3, 4, 7);
  auto before = dev_shm();
  JobSpec spec;
  spec.np = np;
  spec.argv = {kWorker, "matrix", kBig};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO("np=" << np << "\n" << r.dump());
  CHECK(r.ok());
  CHECK(added(before, dev_shm()).empty());
}

TEST_CASE("host path: the collectives matrix across simulated hosts", "[runtime][job][shm]") {
  auto hosts =
      GENERATE(std::vector<int>{2, 2}, std::vector<int>{3, 3, 3}, std::vector<int>{2, 1, 3});
  int np = 0;
  for (int n : hosts) np += n;
  JobSpec spec;
  spec.np = np;
  spec.hosts = hosts;
  spec.argv = {kWorker, "matrix", kBig};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO("hosts=" << hosts.size() << " np=" << np << "\n" << r.dump());
  CHECK(r.ok());
}

TEST_CASE("host path: the leaders' mesh listens on the interface GLOO_SOCKET_IFNAME names",
          "[runtime][job][shm]") {
  // An interface other than loopback with an IPv4 address, so that the mesh's sockets
  // show whether they moved off the address toward the rendezvous (127.0.0.1).
  std::string name, address;
  const hvdrun::InterfaceList list = hvdrun::list_interfaces();
  for (const ifaddrs* a = list.get(); a != nullptr && name.empty(); a = a->ifa_next) {
    if (!hvdrun::usable_address(*a) || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    name = a->ifa_name;
    address = hvdrun::address_text(a->ifa_addr);
  }
  if (name.empty()) HVDRUN_SKIP("no interface besides loopback has an IPv4 address");
  CHECK(hvdrun::runtime::mesh_address("127.0.0.1", name.c_str()) == address);
  CHECK(hvdrun::runtime::mesh_address("127.0.0.1", ("no-such0," + name).c_str()) == address);
  CHECK(hvdrun::runtime::mesh_address("127.0.0.1", "no-such0") == "127.0.0.1");
  CHECK(hvdrun::runtime::mesh_address("127.0.0.1", nullptr) == "127.0.0.1");
  JobSpec spec;
  spec.np = 4;
  spec.hosts = {2, 2};
  spec.argv = {kWorker, "sockets", "across-hosts"};
  spec.env = {
      {"HVDRUN_NCCL", "off"}, {"GLOO_SOCKET_IFNAME", name}, {"HVDRUN_TEST_MESH_ADDR", address}};
  auto r = run_job(spec);
  INFO(name << " " << address << "\n" << r.dump());
  CHECK(r.ok());
  // Without it, the mesh is on the address toward the rendezvous: the check tells them apart.
  spec.env = {{"HVDRUN_NCCL", "off"}, {"HVDRUN_TEST_MESH_ADDR", "127.0.0.1"}};
  auto plain = run_job(spec);
  INFO(plain.dump());
  CHECK(plain.ok());
  spec.env["HVDRUN_TEST_MESH_ADDR"] = address;
  CHECK_FALSE(run_job(spec).ok());
}

TEST_CASE("host path: HVDRUN_HOST_PATH=gloo keeps the Gloo path among all ranks",
          "[runtime][job][shm]") {
  JobSpec spec;
  spec.np = 3;
  spec.argv = {kWorker, "collectives"};
  spec.env = {{"HVDRUN_HOST_PATH", "gloo"}, {"HVDRUN_NCCL", "off"}};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.ok());
}

TEST_CASE("is_homogeneous: every rank has the world's answer, whatever its own sizes",
          "[runtime][job][shm][checkin]") {
  // Hosts of 3, 2 and 1 ranks: ranks 1 and 3 have size == local_size * cross_size, and used
  // to answer True alone. Each check-in (a rank's own, through its host's leader, and the
  // Gloo path's) and a single host, too.
  struct Layout {
    std::vector<int> hosts;
    int np;
    bool even;
  };
  auto layout = GENERATE(Layout{{3, 2, 1}, 6, false}, Layout{{2, 1}, 3, false},
                         Layout{{2, 2, 2}, 6, true}, Layout{{}, 3, true});
  auto checkin = GENERATE(as<std::string>{}, "rank", "host", "gloo");
  JobSpec spec;
  spec.np = layout.np;
  spec.hosts = layout.hosts;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker", "homogeneous"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  if (checkin == "gloo")
    spec.env["HVDRUN_HOST_PATH"] = "gloo";
  else
    spec.env["HVDRUN_CHECKIN"] = checkin;
  auto r = run_job(spec);
  INFO("hosts " << Catch::Detail::stringify(layout.hosts) << ", " << checkin << "\n" << r.dump());
  CHECK(r.ok());
  CHECK(r.ranks.size() == static_cast<std::size_t>(layout.np));
  for (const auto& rr : r.ranks)
    CHECK_THAT(rr.err, Catch::Contains("rank " + std::to_string(rr.rank) +
                                       ": homogeneous=" + (layout.even ? "1" : "0")));
}

TEST_CASE("host path: the ranks of a single-host job have no TCP connection to each other",
          "[runtime][job][shm]") {
  JobSpec spec;
  spec.np = 4;
  spec.argv = {kWorker, "sockets"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.ok());
  for (const auto& rr : r.ranks)
    CHECK_THAT(rr.err, Catch::Contains("rendezvous 1, other 0; memfd segment mapped"));
  // The same check sees Gloo's connections when that path is forced, so it can see them.
  spec.argv = {kWorker, "sockets", "expect-tcp"};
  spec.env["HVDRUN_HOST_PATH"] = "gloo";
  auto g = run_job(spec);
  INFO(g.dump());
  CHECK(g.ok());
}

TEST_CASE("host path: a rank killed inside a collective is named by the others at once",
          "[runtime][job][shm][fault]") {
  auto kind = GENERATE(as<std::string>{}, "large", "small");
  auto hosts = GENERATE(std::vector<int>{}, std::vector<int>{2, 2});
  auto before = dev_shm();
  JobSpec spec;
  spec.np = 4;
  spec.hosts = hosts;
  spec.argv = {kWorker, "kill-mid", kind};
  // Far above the time allowed below: the failure must come from noticing the death.
  spec.env = {{"HVDRUN_OP_TIMEOUT", "60"}, {"HVDRUN_NCCL", "off"}};
  spec.deadline = 30s;
  auto r = run_job(spec);
  INFO(kind << (hosts.empty() ? " one host" : " 2 hosts x 2") << "\n" << r.dump());
  CHECK(!r.timed_out);
  CHECK(r.elapsed < 10s);
  for (const auto& rr : r.ranks) {
    if (rr.rank == 1) {
      CHECK(rr.exit_code == 128 + SIGKILL);
    } else {
      CHECK(rr.exit_code == 5);
      // Rank 1's host peers see it exit; the other host's ranks get that from the
      // store through their leader, whose Gloo connection was merely reset.
      CHECK_THAT(rr.err, Catch::Contains("rank(s) 1 exited"));
    }
  }
  CHECK(added(before, dev_shm()).empty());
}

TEST_CASE("host path: a stopped rank is named when HVDRUN_OP_TIMEOUT passes",
          "[runtime][job][shm][fault]") {
  JobSpec spec;
  spec.np = 3;
  spec.argv = {kWorker, "stop-after-init"};
  spec.env = {{"HVDRUN_OP_TIMEOUT", "1"}, {"HVDRUN_NCCL", "off"}};
  spec.deadline = 4s;  // then the stopped rank is killed
  auto r = run_job(spec);
  INFO(r.dump());
  for (const auto& rr : r.ranks)
    if (rr.rank != 1) {
      CHECK(rr.exit_code == 4);
      CHECK_THAT(rr.err,
                 Catch::Contains("rank(s) 1 did not arrive within 1 s (HVDRUN_OP_TIMEOUT)"));
    }
}

TEST_CASE("host check-in: a host's ranks reach the rendezvous through local rank 0",
          "[runtime][job][shm][checkin]") {
  // 8 ranks on 2 simulated hosts: one connection per host instead of one per rank, and
  // the collectives still right on every rank.
  auto mode = GENERATE(as<std::string>{}, "host", "rank");
  JobSpec spec;
  spec.np = 8;
  spec.hosts = {4, 4};
  spec.argv = {kWorker, "collectives"};
  spec.env = {{"HVDRUN_NCCL", "off"}, {"HVDRUN_CHECKIN", mode}};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO("checkin=" << mode << "\n" << r.dump());
  CHECK(r.ok());
  CHECK(r.connections == (mode == "host" ? 2u : 8u));
}

TEST_CASE("host check-in: a missing rank is named on every host, through the leaders",
          "[runtime][job][shm][checkin]") {
  JobSpec spec;
  spec.np = 6;
  spec.hosts = {3, 3};
  spec.skip = {5};
  spec.argv = {kWorker, "barrier"};
  spec.env = {{"HVDRUN_NCCL", "off"}, {"HVDRUN_CHECKIN", "host"}, {"HVDRUN_START_TIMEOUT", "2"}};
  spec.deadline = 20s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(!r.timed_out);
  CHECK(r.elapsed < 6s);
  REQUIRE(r.ranks.size() == 5);
  for (const auto& rr : r.ranks) {
    CHECK(rr.exit_code == 3);
    // Host 0 checked in whole and waited for the world: its leader names the ranks that
    // did not check in (all of host 1, whose batch never came), and its other ranks get
    // that reason through the segment. Host 1 never completed: its ranks name the local
    // rank that did not come.
    if (rr.rank < 3)
      CHECK_THAT(rr.err, Catch::Contains("ranks 3, 4, 5 did not arrive within 2 s (3 of 6 "
                                         "checked in"));
    else
      CHECK_THAT(rr.err,
                 Catch::Contains("5 did not") && Catch::Contains("before the start timeout"));
  }
  // The host whose leader checked in opened one connection; the other none.
  CHECK(r.connections <= 2u);
  std::printf(
      "host-checkin: rank 5 of 2 hosts x 3 missing, start timeout 2 s: all failed in %lld ms\n",
      static_cast<long long>(r.elapsed.count()));
}

TEST_CASE("host path: descriptors per host grow linearly with its ranks, not quadratically",
          "[runtime][job][shm]") {
  // Every rank used to hold a pidfd of every local peer: L * (L - 1) descriptors, 261,632
  // at 512 local ranks. Local rank 0 watches all, the others only it.
  JobSpec spec;
  spec.np = 12;
  spec.argv = {kWorker, "pidfds"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  auto r = run_job(spec);
  INFO(r.dump());
  REQUIRE(r.ok());
  for (const auto& rr : r.ranks)
    CHECK_THAT(rr.err, Catch::Contains(rr.rank == 0 ? "local rank 0: pidfds 11"
                                                    : "local rank " + std::to_string(rr.rank) +
                                                          ": pidfds 1\n"));
}

TEST_CASE("host check-in: two processes claiming one local rank are refused, naming it",
          "[runtime][job][shm][checkin]") {
  // Per-rank check-in refuses a second HVDRUN_RANK at the store; through the leader the
  // segment's hand-out refuses a second HVDRUN_LOCAL_RANK.
  JobSpec spec;
  spec.np = 3;
  spec.extra = {1};
  spec.argv = {kWorker, "barrier"};
  spec.env = {{"HVDRUN_NCCL", "off"}, {"HVDRUN_CHECKIN", "host"}, {"HVDRUN_START_TIMEOUT", "3"}};
  spec.deadline = 20s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(!r.timed_out);
  CHECK(!r.ok());
  // Whichever of the two came second is refused: by local rank 0 while it still hands
  // out the segment, or, once every local rank has it, by finding no socket.
  CHECK_THAT(r.dump(), Catch::Contains("two processes asked for the segment as local rank 1 "
                                       "(ranks 1 and 1)") ||
                           Catch::Contains("a second one with HVDRUN_LOCAL_RANK=1"));
  std::printf("host-checkin: local rank 1 started twice, start timeout 3 s: refused in %lld ms\n",
              static_cast<long long>(r.elapsed.count()));
}

TEST_CASE("shm: a local rank whose connection local rank 0 closes unserved is told why",
          "[runtime][shm][checkin]") {
  // What a second process of one local rank meets when it reaches local rank 0's backlog
  // as that one finishes handing out: accepted (or dropped) and closed, nothing sent. The
  // close shows at its send or its receive; either way the message is the same.
  const std::string name = "hvdrun-test-unserved-" + std::to_string(::getpid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  hvdrun::UniqueFd srv(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(::bind(srv.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::listen(srv.get(), 4) == 0);
  std::thread leader(
      [&] { hvdrun::UniqueFd c(::accept4(srv.get(), nullptr, nullptr, SOCK_CLOEXEC)); });
  hvdrun::runtime::ShmMember me;
  me.local_rank = 1;
  me.local_size = 2;
  me.global_rank = 1;
  me.global_size = 2;
  me.host = "localhost";
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      hvdrun::runtime::ShmComm(nullptr, name, me, t0 + 10s, 10s),
      Catch::Contains("local rank 0 closed its socket without handing over the segment") &&
          Catch::Contains("a second one with HVDRUN_LOCAL_RANK=1"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // at once, not at the deadline
  leader.join();
}
