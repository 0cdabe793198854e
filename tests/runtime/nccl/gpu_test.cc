// The NCCL path on a GPU: rank programs (runtime_gpu_worker) check every device
// collective at np 1, 2 and 3. Without a CUDA device the case says so and checks nothing;
// runtime_test checks the failure paths there.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "runtime/nccl/nccl_comm.h"
#include "tests/runtime/job_harness.h"

using namespace std::chrono_literals;
using hvdrun::test::JobSpec;
using hvdrun::test::run_job;

namespace {

const std::string gpu_worker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_gpu_worker";

// CUDA devices this process sees; without one, says so (the case then checks nothing).
int visible_devices() {
  std::string why;
  const int devices = hvdrun::runtime::cuda_device_count(&why);
  if (devices <= 0)
    WARN("no CUDA device here (" << why << "); the GPU path is exercised on GPU machines only");
  return devices;
}

}  // namespace

TEST_CASE("NCCL collectives on device memory (needs a GPU)", "[gpu]") {
  const int devices = visible_devices();
  if (devices <= 0) return;
  for (int np : {1, 2, 3}) {
    DYNAMIC_SECTION("np " << np) {
      JobSpec spec;
      spec.np = np;
      // More ranks than GPUs: NCCL refuses two ranks of one host on one device, so each
      // rank claims a host of its own (NCCL_HOSTID) and NCCL joins them over sockets.
      if (np > devices)
        spec.argv = {"/bin/sh", "-c", "NCCL_HOSTID=gpu-test-$HVDRUN_RANK exec \"$0\" check",
                     gpu_worker};
      else
        spec.argv = {gpu_worker, "check"};
      spec.env = {{"HVDRUN_NCCL", "require"}, {"HVDRUN_START_TIMEOUT", "60"}};
      spec.deadline = 120s;
      auto r = run_job(spec);
      INFO(r.dump());
      CHECK(r.ok());
    }
  }
}

TEST_CASE("NCCL's scalable init with several unique ids (needs a GPU)", "[gpu]") {
  const int devices = visible_devices();
  if (devices <= 0) return;
  // One id per rank: three ids, three bootstrap roots, so ncclCommInitRankScalable runs
  // where the loaded NCCL has it (2.23 and later); NCCL's own log names the init it ran.
  JobSpec spec;
  spec.np = 3;
  const std::string script =
      "if [ \"$0\" -ge \"$HVDRUN_LOCAL_SIZE\" ]; then exec \"$1\" check; fi; "
      "NCCL_HOSTID=gpu-scalable-$HVDRUN_RANK exec \"$1\" check";
  spec.argv = {"/bin/sh", "-c", script, std::to_string(devices), gpu_worker};
  spec.env = {{"HVDRUN_NCCL", "require"},
              {"HVDRUN_START_TIMEOUT", "60"},
              {"HVDRUN_NCCL_RANKS_PER_ID", "1"},
              {"NCCL_DEBUG", "INFO"},
              {"NCCL_DEBUG_SUBSYS", "INIT"}};
  spec.deadline = 120s;
  auto r = run_job(spec);
  INFO(r.dump());
  REQUIRE(r.ok());
  const std::string all = r.dump();
  if (hvdrun::runtime::nccl_version() >= 22300)
    CHECK(all.find("ncclCommInitRankScalable") != std::string::npos);
  else
    CHECK(all.find("ncclCommInitRankConfig") != std::string::npos);
}
