// Faults while ranks are inside NCCL collectives on a GPU: a rank that dies leaves its
// peers blocked in a device allreduce that can never finish, so the launcher ends the
// job; a rank that stops leaves them blocked with nothing dead, so their device
// watchdog (HVDRUN_OP_TIMEOUT) must; SIGINT to hvdrun must stop ranks busy on the GPU. Both need a
// CUDA device; without one each case says so and checks nothing (the NCCL failure paths without a
// GPU are in tests/runtime). When there are fewer GPUs than ranks, each rank claims a host of its
// own (NCCL_HOSTID) and NCCL joins them over sockets.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <string>
#include <vector>

#include "runtime/nccl/nccl_comm.h"
#include "tests/support/processes.h"

using namespace hvdrun::testing;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

const std::string kGpuWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_gpu_worker";

// hvdrun arguments for `np` ranks of `gpu_worker loop <loop_args>`, with `extra` hvdrun
// options, or {} without a GPU.
std::vector<std::string> gpu_job(int np, const std::string& loop_args,
                                 const std::vector<std::string>& extra = {}) {
  std::string why;
  const int devices = hvdrun::runtime::cuda_device_count(&why);
  if (devices <= 0) {
    WARN("no CUDA device here (" << why << "); GPU fault cases run on GPU machines only");
    return {};
  }
  std::string hostid = np > devices ? "NCCL_HOSTID=fault-$HVDRUN_RANK " : "";
  std::vector<std::string> args = {"-np", std::to_string(np), "-x", "HVDRUN_NCCL=require"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"sh", "-c", hostid + "exec \"$0\" loop " + loop_args, kGpuWorker});
  return args;
}

}  // namespace

TEST_CASE("a rank dying between NCCL allreduces ends the job and stops the peers blocked in NCCL",
          "[gpu][fault]") {
  auto args = gpu_job(3, "1");
  if (args.empty()) return;
  std::string marker = unique_marker();
  Hvdrun h(args, {marker});
  h.read_until([](const std::string& out) { return count(out, "ready") == 3; }, 90s);
  auto t0 = Clock::now();
  CHECK(h.wait(30s) == 7);
  double ms = ms_since(t0);
  CHECK_THAT(h.err, Catch::Contains("rank 1 on host localhost exited with code 7"));
  CHECK(wait_none_with(marker, 10s));
  report_fault({"rank exits during NCCL allreduces on a GPU (3 ranks, 2 left blocked in NCCL)",
                "hvdrun exits 7 naming the rank; the blocked ranks are stopped", ms,
                static_cast<int>(processes_with(marker).size()), "nothing"});
}

TEST_CASE("SIGINT to hvdrun stops ranks running NCCL allreduces on a GPU", "[gpu][fault]") {
  auto args = gpu_job(2, "");
  if (args.empty()) return;
  std::string marker = unique_marker();
  Hvdrun h(args, {marker});
  h.read_until([](const std::string& out) { return count(out, "ready") == 2; }, 90s);
  auto t0 = Clock::now();
  h.signal(SIGINT);
  CHECK(h.wait(30s) == 130);
  CHECK(wait_none_with(marker, 10s));
  double ms = ms_since(t0);
  report_fault({"SIGINT to hvdrun, 2 ranks inside NCCL allreduces on a GPU",
                "exit 130, every rank stopped", ms, static_cast<int>(processes_with(marker).size()),
                "nothing"});
}

TEST_CASE("a rank stopped between NCCL allreduces ends the job at HVDRUN_OP_TIMEOUT",
          "[gpu][fault]") {
  // Nothing dies. The blocked ranks wait in the next allreduce's negotiation round (on the
  // host, before anything is enqueued on the GPU), which names the stopped rank once
  // HVDRUN_OP_TIMEOUT passes; the worker then exits 4. (A rank stopped while NCCL runs is
  // the device watchdog's case: exit 70, device_watchdog_test.)
  auto args = gpu_job(3, "1 stop", {"-x", "HVDRUN_OP_TIMEOUT=2"});
  if (args.empty()) return;
  std::string marker = unique_marker();
  Hvdrun h(args, {marker});
  h.read_until([](const std::string& out) { return count(out, "ready") == 3; }, 90s);
  auto t0 = Clock::now();
  CHECK(h.wait(30s) == 4);
  double ms = ms_since(t0);
  CHECK(ms > 1500);
  CHECK_THAT(h.err, Catch::Contains("rank(s) 1 did not arrive within 2 s (HVDRUN_OP_TIMEOUT)"));
  CHECK(wait_none_with(marker, 10s));
  report_fault({"rank SIGSTOPped during NCCL allreduces on a GPU, HVDRUN_OP_TIMEOUT=2 (3 ranks)",
                "the blocked ranks' negotiation round names it at the timeout (the worker "
                "exits 4); hvdrun stops the rest",
                ms, static_cast<int>(processes_with(marker).size()), "nothing"});
}
