// Collectives across hosts: the runtime test worker (tests/runtime/worker.cc: allreduce of
// every dtype and op, in place and not, broadcast, allgather, barrier) under the real
// hvdrun binary with -H over the loopback SSH cluster, at np = 1, 2, 3, 4 and 7, with ranks
// on this machine and on "remote" hosts (node1..node3) mixed. Every rank checks its own
// results; the job passes when every rank exits 0.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/processes.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun::testing;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

SshdCluster& cluster() {
  static SshdCluster c(3);
  return c;
}

}  // namespace

TEST_CASE("collectives are correct for every dtype and op across loopback SSH hosts",
          "[ssh][runtime]") {
  auto [np, hosts] = GENERATE(std::pair{1, "node1:1"},                  //
                              std::pair{2, "localhost:1,node1:1"},      //
                              std::pair{3, "node1:1,node2:1,node3:1"},  //
                              std::pair{4, "localhost:2,node1:2"},      //
                              std::pair{7, "localhost:1,node1:2,node2:2,node3:2"});
  std::string marker = unique_marker();
  Hvdrun h({"--ssh-config", cluster().ssh_config(), "-np", std::to_string(np), "-H", hosts,
            "--start-timeout", "30", kWorker, "collectives"},
           {marker});
  int code = h.wait(120s);
  INFO("np " << np << " on " << hosts << "\nstdout: " << h.out << "\nstderr: " << h.err);
  CHECK(code == 0);
  CHECK(without_outside_connections(h.err).empty());
  CHECK(wait_none_with(marker, 5s));
}

// The host path across hosts: each host's ranks share a segment, one leader per host runs
// the authenticated frame mesh (tests/runtime/worker.cc "matrix": every dtype and op at 1, 7, 4097
// and 3,000,001 elements, broadcast and allgather at the same sizes).
TEST_CASE("the host path matrix across loopback SSH hosts, 2 x 2 and 3 x 3",
          "[ssh][runtime][shm]") {
  auto [np, hosts] = GENERATE(std::pair{4, "node1:2,node2:2"},  //
                              std::pair{9, "node1:3,node2:3,node3:3"});
  std::string marker = unique_marker();
  Hvdrun h({"--ssh-config", cluster().ssh_config(), "-np", std::to_string(np), "-H", hosts,
            "--start-timeout", "30", kWorker, "matrix"},
           {marker});
  int code = h.wait(180s);
  INFO("np " << np << " on " << hosts << "\nstdout: " << h.out << "\nstderr: " << h.err);
  CHECK(code == 0);
  CHECK(without_outside_connections(h.err).empty());
  CHECK(wait_none_with(marker, 5s));
}

// HVDRUN_CHECKIN=host through the real launcher on loopback SSH hosts: every rank's
// collectives right, local rank 0 of each host the only rank with a rendezvous
// connection, and the other ranks with no TCP socket at all.
TEST_CASE("hosts check in through their leaders across loopback SSH hosts",
          "[ssh][runtime][shm][checkin]") {
  std::string marker = unique_marker();
  Hvdrun h(
      {"--ssh-config", cluster().ssh_config(), "-np", "6", "-H", "node1:3,node2:3",
       "--start-timeout", "30", "-x", "HVDRUN_CHECKIN=host", kWorker, "sockets", "across-hosts"},
      {marker});
  int code = h.wait(180s);
  INFO("stdout: " << h.out << "\nstderr: " << h.err);
  CHECK(code == 0);
  CHECK(without_outside_connections(h.err).empty());
  CHECK(count(h.out, "tcp sockets: rendezvous 1,") == 2);
  CHECK(count(h.out, "tcp sockets: rendezvous 0, other 0; memfd segment mapped") == 4);
  CHECK(wait_none_with(marker, 5s));
}

// Issue 28: the failure message names the rank that failed first, never one that failed
// because it was gone. After one allreduce (which connects the hosts' Gloo pairs), one rank
// exits 5 where the others enter a second one; they fail with exit 1 for its loss, on its
// host (through the segment) and on the others (through Gloo). A culprit that is local
// rank 1 first leaves the job, as a Python rank's exit does, and exits 100 ms later, so the
// others can fail, and be reported, before it exits (before the launcher held such
// failures back, that blamed one of them in about 1 run of 7). The culprit goes round all
// six places of 3 hosts x 2. HVDRUN_TEST_BLAME_RUNS sets the number of runs (default 72,
// under a minute here; a quarter under the sanitizers; docs/reliability.md has 200).
TEST_CASE("the rank that failed first is blamed, run after run, on 3 hosts x 2",
          "[ssh][runtime][fault]") {
  int runs = 72 / kSlowdown;
  if (const char* v = std::getenv("HVDRUN_TEST_BLAME_RUNS"))
    runs = static_cast<int>(std::strtol(v, nullptr, 10));
  REQUIRE(runs > 0);
  const char* hosts[] = {"node1", "node1", "node2", "node2", "node3", "node3"};
  int right = 0;
  std::string wrong;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) {
    const int culprit = i % 6;
    std::vector<std::string> args = {"--ssh-config",
                                     cluster().ssh_config(),
                                     "-np",
                                     "6",
                                     "-H",
                                     "node1:2,node2:2,node3:2",
                                     kWorker,
                                     "fail-before-collective",
                                     std::to_string(culprit)};
    if (culprit % 2 == 1) args.emplace_back("100");  // leave, exit 100 ms later
    const std::string marker = unique_marker();
    Hvdrun h(args, {marker});
    const int code = h.wait(60s);
    const std::string want = "hvdrun: rank " + std::to_string(culprit) + " on host " +
                             hosts[culprit] + " exited with code 5";
    const auto verdict = h.err.find("hvdrun: rank ");
    if (code == 5 && verdict != std::string::npos && h.err.compare(verdict, want.size(), want) == 0)
      ++right;
    else
      wrong += "run " + std::to_string(i) + " (culprit " + std::to_string(culprit) + "): exit " +
               std::to_string(code) + "\n" + h.err + "\n";
    REQUIRE(wait_none_with(marker, 10s));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN(right << " of " << runs << " runs blamed the rank that failed first (" << secs << " s)");
  INFO(wrong);
  CHECK(right == runs);
}
