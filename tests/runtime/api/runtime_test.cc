// Runtime tests: environment parsing, and whole jobs of real rank processes
// (tests/runtime/worker.cc, linked to libhvdrun.so).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <thread>

#include "hvdrun/hvdrun.h"
#include "runtime/core/env.h"
#include "runtime/nccl/nccl_comm.h"
#include "runtime/reduce/reduce.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"
#include "tests/runtime/job_harness.h"
#include "tests/support/processes.h"

using namespace std::chrono_literals;
using hvdrun::test::JobSpec;
using hvdrun::test::run_job;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

std::map<std::string, std::string> full_env() {
  return {{"HVDRUN_RANK", "1"},
          {"HVDRUN_SIZE", "4"},
          {"HVDRUN_LOCAL_RANK", "1"},
          {"HVDRUN_LOCAL_SIZE", "2"},
          {"HVDRUN_CROSS_RANK", "0"},
          {"HVDRUN_CROSS_SIZE", "2"},
          {"HVDRUN_HOSTNAME", "node1"},
          {"HVDRUN_RENDEZVOUS_ADDR", "10.0.0.1"},
          {"HVDRUN_RENDEZVOUS_PORT", "29500"},
          {"HVDRUN_SECRET", std::string(64, 'a')}};
}

hvdrun::runtime::Environment parse(const std::map<std::string, std::string>& env) {
  return hvdrun::runtime::read_environment([&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("environment contract is parsed", "[runtime][env]") {
  auto e = parse(full_env());
  CHECK(e.rank == 1);
  CHECK(e.size == 4);
  CHECK(e.local_size == 2);
  CHECK(e.cross_size == 2);
  CHECK(e.hostname == "node1");
  CHECK(e.rendezvous_port == 29500);
  CHECK(e.start_timeout == 30s);
  auto env = full_env();
  env["HVDRUN_START_TIMEOUT"] = "5";
  CHECK(parse(env).start_timeout == 5s);
}

TEST_CASE("a process started into a running elastic job runs alone until it joins",
          "[runtime][env]") {
  auto env = full_env();
  CHECK_FALSE(parse(env).joining);
  env["HVDRUN_JOINING"] = "1";
  env["HVDRUN_GENERATION"] = "3";
  env["HVDRUN_CONTROL_FD"] = "7";
  const auto joining = parse(env);
  CHECK(joining.joining);
  CHECK_FALSE(joining.alone);
  // Alone: rank 0 of 1 on a rendezvous of its own, still headed for generation 3 and
  // still hearing its agent.
  const auto alone = hvdrun::runtime::alone(joining);
  CHECK((alone.rank == 0 && alone.size == 1 && alone.local_rank == 0 && alone.local_size == 1 &&
         alone.cross_rank == 0 && alone.cross_size == 1));
  CHECK((alone.alone && alone.standalone));
  CHECK((alone.rendezvous_addr.empty() && alone.rendezvous_port == 0 && alone.secret.empty()));
  CHECK((alone.generation == 3 && alone.control_fd == 7 && alone.hostname == "node1"));
  env["HVDRUN_JOINING"] = "2";
  CHECK_THROWS_WITH(parse(env), Catch::Contains("HVDRUN_JOINING"));
}

TEST_CASE("HVDRUN_CHECKIN: auto checks in through the host's leader from 256 ranks",
          "[runtime][env]") {
  using hvdrun::runtime::checks_in_through_leader;
  using hvdrun::runtime::kCheckinThroughLeaderFrom;
  auto env = full_env();
  CHECK(parse(env).checkin == "auto");
  env["HVDRUN_LOCAL_RANK"] = "0";
  auto sized = [&](int size, int local_size) {
    env["HVDRUN_SIZE"] = std::to_string(size);
    env["HVDRUN_LOCAL_SIZE"] = std::to_string(local_size);
    env["HVDRUN_CROSS_SIZE"] = std::to_string(size / local_size);
    return parse(env);
  };
  CHECK_FALSE(checks_in_through_leader(sized(kCheckinThroughLeaderFrom - 1, 3)));
  CHECK(checks_in_through_leader(sized(kCheckinThroughLeaderFrom, 8)));
  CHECK_FALSE(checks_in_through_leader(sized(kCheckinThroughLeaderFrom, 1)));  // no peers
  env["HVDRUN_HOST_PATH"] = "gloo";  // no segment to check in through
  CHECK_FALSE(checks_in_through_leader(sized(1024, 8)));
  env["HVDRUN_HOST_PATH"] = "auto";
  env["HVDRUN_CHECKIN"] = "rank";
  CHECK_FALSE(checks_in_through_leader(sized(1024, 8)));
  env["HVDRUN_CHECKIN"] = "host";
  CHECK(checks_in_through_leader(sized(4, 2)));
  env["HVDRUN_CHECKIN"] = "leader";
  CHECK_THROWS_WITH(parse(env),
                    Catch::Contains("HVDRUN_CHECKIN='leader' (expected auto, rank or host)"));
}

namespace {

// Every rank of `hosts` (ranks per host, hosts in order) as the launcher places it: local
// rank l's cross_size is the number of hosts with more than l ranks.
std::vector<hvdrun::runtime::Environment> placed_ranks(const std::vector<int>& hosts) {
  std::vector<hvdrun::runtime::Environment> out;
  int size = 0;
  for (int n : hosts) size += n;
  for (int n : hosts) {
    for (int l = 0; l < n; ++l) {
      hvdrun::runtime::Environment e;
      e.rank = static_cast<int>(out.size());
      e.size = size;
      e.local_rank = l;
      e.local_size = n;
      e.cross_size =
          static_cast<int>(std::count_if(hosts.begin(), hosts.end(), [&](int m) { return m > l; }));
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("is_homogeneous: the arrival counter says whether every host runs as many ranks",
          "[runtime][env]") {
  using hvdrun::runtime::Arrivals;
  using hvdrun::runtime::fits_even_layout;
  // Every layout of 1 to 4 hosts of 1 to 4 ranks, in any order: summed over the ranks (each
  // checking in itself) or over the hosts' leaders (local rank 0 checking its host in), the
  // counter counts every rank and is even exactly when the hosts' rank counts are equal.
  std::vector<std::vector<int>> layouts = {{}};
  for (int hosts = 1; hosts <= 4; ++hosts) {
    std::vector<std::vector<int>> longer;
    for (const auto& l : layouts) {
      if (static_cast<int>(l.size()) != hosts - 1) continue;
      for (int n = 1; n <= 4; ++n) {
        longer.push_back(l);
        longer.back().push_back(n);
      }
    }
    layouts.insert(layouts.end(), longer.begin(), longer.end());
  }
  CHECK(layouts.size() == 1 + 4 + 16 + 64 + 256);
  for (const auto& hosts : layouts) {
    if (hosts.empty()) continue;
    const bool even =
        std::adjacent_find(hosts.begin(), hosts.end(), std::not_equal_to<>()) == hosts.end();
    std::int64_t by_rank = 0, by_host = 0;
    for (const auto& e : placed_ranks(hosts)) {
      by_rank += Arrivals::of(1, fits_even_layout(e));
      if (e.local_rank == 0) by_host += Arrivals::of(e.local_size, fits_even_layout(e));
    }
    INFO("hosts " << Catch::Detail::stringify(hosts));
    CHECK(Arrivals(by_rank).ranks() == placed_ranks(hosts).front().size);
    CHECK(Arrivals(by_host).ranks() == placed_ranks(hosts).front().size);
    CHECK(Arrivals(by_rank).even() == even);
    CHECK(Arrivals(by_host).even() == even);
  }
  // Hosts of 3, 2 and 1 ranks: ranks 1 and 3 find size == local_size * cross_size, the
  // test each rank used to answer by alone; the world is uneven all the same.
  const auto ranks = placed_ranks({3, 2, 1});
  std::vector<int> fitting;
  for (const auto& e : ranks)
    if (fits_even_layout(e)) fitting.push_back(e.rank);
  CHECK(fitting == std::vector<int>{1, 3});
  // The largest world: 2^20 ranks, every one off an even layout, still fits the counter.
  const std::int64_t most = std::int64_t{1 << 20} * Arrivals::of(1, false);
  CHECK(Arrivals(most).ranks() == 1 << 20);
  CHECK_FALSE(Arrivals(most).even());
  CHECK(Arrivals(Arrivals::of(1 << 20, true)).ranks() == 1 << 20);
}

TEST_CASE("missing or garbled environment says to run under hvdrun", "[runtime][env]") {
  // Part of the job's variables: the missing ones named, and the set ones to unset.
  CHECK_THROWS_WITH(
      parse({{"HVDRUN_RANK", "0"}, {"HVDRUN_SIZE", "2"}}),
      Catch::Contains("not started by hvdrun") && Catch::Contains("missing HVDRUN_LOCAL_RANK") &&
          Catch::Contains("HVDRUN_SECRET;") && Catch::Contains("hvdrun -np") &&
          Catch::Contains("or unset HVDRUN_RANK, HVDRUN_SIZE to run it as a single process"));
  auto partial = full_env();
  partial.erase("HVDRUN_SECRET");
  CHECK_THROWS_WITH(parse(partial), Catch::Contains("missing HVDRUN_SECRET;"));
  auto env = full_env();
  env["HVDRUN_RANK"] = "4";
  CHECK_THROWS_WITH(parse(env), Catch::Contains("HVDRUN_RANK=4 (not below HVDRUN_SIZE=4)"));
  env = full_env();
  env["HVDRUN_RENDEZVOUS_PORT"] = "80x";
  CHECK_THROWS_WITH(parse(env), Catch::Contains("HVDRUN_RENDEZVOUS_PORT='80x'"));
  env = full_env();
  env["HVDRUN_SECRET"] = "not-hex";
  CHECK_THROWS_WITH(parse(env), Catch::Contains("HVDRUN_SECRET"));
  env = full_env();
  env["HVDRUN_START_TIMEOUT"] = "0";
  CHECK_THROWS_WITH(parse(env), Catch::Contains("HVDRUN_START_TIMEOUT"));
}

TEST_CASE("no job variables at all: a single process, unless another launcher started several",
          "[runtime][env]") {
  auto e = parse({{"HVDRUN_NCCL", "off"}, {"HVDRUN_OP_TIMEOUT", "7"}, {"WORLD_SIZE", "1"}});
  CHECK(e.standalone);
  CHECK(e.rank == 0);
  CHECK(e.size == 1);
  CHECK(e.local_size == 1);
  CHECK(e.cross_size == 1);
  CHECK(e.hostname == "localhost");
  CHECK(e.nccl_mode == "off");  // the settings still apply
  CHECK(e.op_timeout == 7s);
  CHECK_FALSE(parse(full_env()).standalone);
  CHECK_THROWS_WITH(parse({{"HVDRUN_NCCL", "maybe"}}), Catch::Contains("HVDRUN_NCCL='maybe'"));
  CHECK_THROWS_WITH(parse({{"SLURM_STEP_NUM_TASKS", "4"}}),
                    Catch::Contains("one of 4 started by srun (SLURM_STEP_NUM_TASKS=4)") &&
                        Catch::Contains("hvdrun -np 4"));
  CHECK_THROWS_WITH(parse({{"HOROVOD_SIZE", "2"}}), Catch::Contains("started by horovodrun"));
  CHECK_THROWS_WITH(parse({{"OMPI_COMM_WORLD_SIZE", "3"}}), Catch::Contains("started by mpirun"));
  CHECK_THROWS_WITH(parse({{"WORLD_SIZE", "8"}}),
                    Catch::Contains("torchrun") && Catch::Contains("unset WORLD_SIZE"));
}

TEST_CASE("a C or C++ program started without hvdrun runs as rank 0 of 1", "[runtime][job]") {
  // No HVDRUN_* variables, whatever the environment running the tests holds.
  std::vector<std::string> argv = {"/usr/bin/env"};
  for (const char* n :
       {"HVDRUN_RANK", "HVDRUN_SIZE", "HVDRUN_LOCAL_RANK", "HVDRUN_LOCAL_SIZE", "HVDRUN_CROSS_RANK",
        "HVDRUN_CROSS_SIZE", "HVDRUN_HOSTNAME", "HVDRUN_RENDEZVOUS_ADDR", "HVDRUN_RENDEZVOUS_PORT",
        "HVDRUN_SECRET", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS",
        "WORLD_SIZE"}) {
    argv.emplace_back("-u");
    argv.emplace_back(n);
  }
  argv.emplace_back("HVDRUN_NCCL=off");
  // The C worker (the C ABI), plain and asynchronous, and the C++ worker's collectives
  // (hvdrun::allreduce, broadcast, allgather of the C++ API).
  const std::vector<std::vector<std::string>> programs = {
      {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker"},
      {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker", "async"},
      {HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker", "collectives"}};
  for (const auto& program : programs) {
    auto args = argv;
    args.insert(args.end(), program.begin(), program.end());
    const std::string mode = program.size() > 1 ? program[1] : "";
    hvdrun::testing::CapturedProcess p(args);
    const int code = p.wait(60s);
    INFO(program[0] << " '" << mode << "'\nstdout:\n" << p.out << "\nstderr:\n" << p.err);
    CHECK(code == 0);
    if (mode.empty()) CHECK(p.out == "rank 0: ok\n");
    // One info line, naming what happened and what to run for more ranks.
    CHECK(hvdrun::testing::count(p.err, "running as a single process, rank 0 of 1") == 1);
    CHECK_THAT(p.err, Catch::Contains("hvdrun -np N"));
  }
}

TEST_CASE("calls before init fail with a clear error", "[runtime]") {
  CHECK_THROWS_WITH(hvdrun::rank(), Catch::Contains("before hvdrun::init()"));
  int x = 0;
  CHECK_THROWS_AS(hvdrun::allreduce(&x, &x, 1, hvdrun::DataType::kInt32), hvdrun::Error);
}

TEST_CASE("16-bit float conversions round to nearest even", "[runtime][reduce]") {
  using namespace hvdrun::runtime;
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 1000.0f})
    CHECK(to_float(to_half(f)) == f);
  CHECK(to_half(65520.0f).bits == 0x7c00);            // overflow to infinity
  CHECK(to_half(1.0f + 1.0f / 4096).bits == 0x3c00);  // tie rounds to even
  CHECK(std::isnan(to_float(to_half(std::nanf("")))));
  CHECK(to_float(to_half(3e-8f)) == 5.9604645e-08f);  // rounds up to the smallest subnormal
  for (float f : {0.0f, 1.0f, -3.0f, 256.0f, 0x1.8p100f}) CHECK(to_float(to_bfloat16(f)) == f);
  CHECK(to_bfloat16(1.0f + 1.0f / 256).bits == 0x3f80);  // tie to even
}

TEST_CASE("collectives are correct for every dtype and op", "[runtime][job]") {
  auto np = GENERATE(1, 2, 3, 4, 7);
  JobSpec spec;
  spec.np = np;
  spec.argv = {kWorker, "collectives"};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO("np=" << np << "\n" << r.dump());
  CHECK(r.ok());
}

TEST_CASE("a rank that never arrives is named by every other rank within the start timeout",
          "[runtime][job]") {
  JobSpec spec;
  spec.np = 4;
  spec.argv = {kWorker, "barrier"};
  spec.skip = {1, 3};
  spec.env = {{"HVDRUN_START_TIMEOUT", "2"}};
  spec.deadline = 20s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(!r.timed_out);
  CHECK(r.elapsed < 5s);
  REQUIRE(r.ranks.size() == 2);
  for (const auto& rr : r.ranks) {
    CHECK(rr.exit_code == 3);
    CHECK_THAT(rr.err, Catch::Contains("ranks 1, 3 did not arrive within 2 s") &&
                           Catch::Contains("2 of 4 checked in"));
  }
}

TEST_CASE("two processes claiming the same rank are refused", "[runtime][job]") {
  JobSpec spec;
  spec.np = 2;
  spec.argv = {kWorker, "barrier"};
  spec.extra = {0};
  spec.env = {{"HVDRUN_START_TIMEOUT", "3"}};
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.dump().find("rank 0 has already checked in") != std::string::npos);
}

TEST_CASE("a rank leaving mid-job makes the others fail, not hang", "[runtime][job]") {
  JobSpec spec;
  spec.np = 3;
  spec.argv = {kWorker, "exit-after-init"};
  spec.env = {{"HVDRUN_OP_TIMEOUT", "2"}};
  spec.deadline = 20s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(!r.timed_out);
  for (const auto& rr : r.ranks) {
    if (rr.rank == 1) {
      CHECK(rr.exit_code == 0);
    } else {
      CHECK(rr.exit_code == 5);
      CHECK_THAT(rr.err, Catch::Contains("rank(s) 1"));
    }
  }
}

TEST_CASE("NCCL init without a GPU fails cleanly within the deadline", "[runtime][nccl][job]") {
  std::string why;
  if (hvdrun::runtime::cuda_device_count(&why) > 0) {
    WARN("a CUDA device is visible; the no-GPU path is not exercised here");
    return;
  }
  JobSpec spec;
  spec.np = 2;
  spec.argv = {kWorker, "barrier"};
  spec.env = {{"HVDRUN_NCCL", "require"}, {"HVDRUN_START_TIMEOUT", "10"}};
  spec.deadline = 20s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(!r.timed_out);
  CHECK(r.elapsed < 5s);
  for (const auto& rr : r.ranks) {
    CHECK(rr.exit_code == 3);
    CHECK_THAT(rr.err, Catch::Contains("nccl"));
  }
}

TEST_CASE("without NCCL required, CPU collectives still work and say why NCCL is off",
          "[runtime][nccl][job]") {
  JobSpec spec;
  spec.np = 2;
  spec.argv = {kWorker, "barrier"};
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.ok());
}

TEST_CASE("a C program uses the C ABI", "[runtime][job]") {
  JobSpec spec;
  spec.np = 3;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker"};
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.ok());
}

TEST_CASE("the C ABI's asynchronous collectives complete in submission order", "[runtime][job]") {
  auto np = GENERATE(1, 2, 4);
  JobSpec spec;
  spec.np = np;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker", "async"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 60s;
  auto r = run_job(spec);
  INFO("np=" << np << "\n" << r.dump());
  CHECK(r.ok());
}

TEST_CASE("the C ABI's negotiated collectives: mismatches named, names in any order, join",
          "[runtime][job]") {
  auto np = GENERATE(2, 4);
  auto hosts = GENERATE(std::vector<int>{}, std::vector<int>{1, 1});
  if (!hosts.empty() && np != 2) return;  // two simulated hosts of one rank each
  JobSpec spec;
  spec.np = np;
  spec.hosts = hosts;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker", "negotiate"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 60s;
  auto r = run_job(spec);
  INFO("np=" << np << (hosts.empty() ? " one host" : " two hosts") << "\n" << r.dump());
  CHECK(r.ok());
  for (const auto& rr : r.ranks) CHECK_THAT(rr.err, Catch::Contains("negotiate ok"));
}

TEST_CASE("the C ABI's alltoall and reducescatter: uneven splits and rows, capacity checked",
          "[runtime][job]") {
  auto np = GENERATE(2, 3, 4);
  auto hosts = GENERATE(std::vector<int>{}, std::vector<int>{1, 1}, std::vector<int>{2, 2});
  if (!hosts.empty() && np != static_cast<int>(hosts.size()) * hosts[0]) return;
  JobSpec spec;
  spec.np = np;
  spec.hosts = hosts;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker", "scatter"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 60s;
  auto r = run_job(spec);
  INFO("np=" << np << " hosts=" << hosts.size() << "\n" << r.dump());
  CHECK(r.ok());
  for (const auto& rr : r.ranks) CHECK_THAT(rr.err, Catch::Contains("scatter ok"));
}

TEST_CASE("a lost peer fails queued asynchronous collectives and every later one",
          "[runtime][job]") {
  JobSpec spec;
  spec.np = 3;
  spec.argv = {HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker", "async-lost"};
  spec.env = {{"HVDRUN_OP_TIMEOUT", "3"}, {"HVDRUN_NCCL", "off"}};
  spec.deadline = 30s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(!r.timed_out);
  CHECK(r.ok());
  for (const auto& rr : r.ranks)
    if (rr.rank != 1) CHECK_THAT(rr.err, Catch::Contains("lost peer reported"));
}

TEST_CASE("Python ctypes drives libhvdrun.so", "[runtime][python][job]") {
  JobSpec spec;
  spec.np = 3;
  spec.argv = {"/usr/bin/python3", HVDRUN_SOURCE_DIR "/tests/runtime/ctypes_worker.py"};
  spec.env = {{"HVDRUN_LIB", HVDRUN_BINARY_DIR "/runtime/libhvdrun.so"}};
#ifdef HVDRUN_SANITIZED_BUILD
  // A sanitizer runtime cannot be injected into python3 reliably (even preloaded, ASan
  // aborts in its interceptors); the C and C++ ranks cover the library in these builds.
  WARN("skipped in sanitizer builds: python3 cannot load an instrumented libhvdrun.so");
  return;
#endif
  spec.deadline = 60s;
  auto r = run_job(spec);
  INFO(r.dump());
  CHECK(r.ok());
}

TEST_CASE("a process set's environment: its rank and size, its members per host, its hosts",
          "[runtime][process_set]") {
  using hvdrun::runtime::set_environment;
  // Six ranks on three hosts (ids 7, 8, 9): 0 1 | 2 3 | 4 5.
  const std::vector<std::uint64_t> hosts = {7, 7, 8, 8, 9, 9};
  hvdrun::runtime::Environment world;
  world.size = 6;
  world.rank = 3;
  auto e = set_environment(world, {1, 3, 5}, hosts);  // one rank per host
  CHECK(e.rank == 1);
  CHECK(e.size == 3);
  CHECK(e.local_rank == 0);
  CHECK(e.local_size == 1);
  CHECK(e.cross_rank == 1);
  CHECK(e.cross_size == 3);
  e = set_environment(world, {2, 3}, hosts);  // one host
  CHECK((e.rank == 1 && e.size == 2 && e.local_rank == 1 && e.local_size == 2));
  CHECK((e.cross_rank == 0 && e.cross_size == 1));
  world.rank = 4;
  e = set_environment(world, {0, 2, 3, 4}, hosts);  // hosts numbered by their lowest member
  CHECK((e.rank == 3 && e.local_rank == 0 && e.local_size == 1));
  CHECK((e.cross_rank == 2 && e.cross_size == 3));
}
