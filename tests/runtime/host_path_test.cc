// The host-memory path (runtime/host_comm.*, shm_comm.*): whole jobs of rank processes
// (tests/runtime/worker.cc) on one host and across simulated hosts (job_harness gives
// each block of ranks its own HVDRUN_HOSTNAME, so each block shares its own segment and
// the blocks' leaders talk Gloo over loopback), the absence of TCP between the ranks of
// one host, and a rank killed inside a collective.
#include <dirent.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <string>

#include "tests/runtime/job_harness.h"

using namespace std::chrono_literals;
using hvdrun::test::JobSpec;
using hvdrun::test::run_job;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

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
    if (before.count(n) == 0 && n.find("hvdrun") != std::string::npos) s += " " + n;
  return s;
}

}  // namespace

TEST_CASE("host path: the collectives matrix on one host", "[runtime][job][shm]") {
  auto np = GENERATE(1, 2, 3, 4, 7);
  auto before = dev_shm();
  JobSpec spec;
  spec.np = np;
  spec.argv = {kWorker, "matrix"};
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
  spec.argv = {kWorker, "matrix"};
  spec.env = {{"HVDRUN_NCCL", "off"}};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO("hosts=" << hosts.size() << " np=" << np << "\n" << r.dump());
  CHECK(r.ok());
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
