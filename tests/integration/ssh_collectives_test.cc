// Collectives across hosts: the runtime test worker (tests/runtime/worker.cc: allreduce of
// every dtype and op, in place and not, broadcast, allgather, barrier) under the real
// hvdrun binary with -H over the loopback SSH cluster, at np = 1, 2, 3, 4 and 7, with ranks
// on this machine and on "remote" hosts (node1..node3) mixed. Every rank checks its own
// results; the job passes when every rank exits 0.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <utility>

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
  CHECK(h.err.empty());
  CHECK(wait_none_with(marker, 5s));
}

// The host path across hosts: each host's ranks share a segment, one leader per host runs
// Gloo (tests/runtime/worker.cc "matrix": every dtype and op at 1, 7, 4097 and 3,000,001
// elements, broadcast and allgather at the same sizes).
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
  CHECK(h.err.empty());
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
  CHECK(h.err.empty());
  CHECK(count(h.out, "tcp sockets: rendezvous 1,") == 2);
  CHECK(count(h.out, "tcp sockets: rendezvous 0, other 0; memfd segment mapped") == 4);
  CHECK(wait_none_with(marker, 5s));
}
