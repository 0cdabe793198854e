// hvdrun's diagnosis flags end to end on localhost (docs/diagnosis.md): --timeout tears down a
// hung job and exits 124 with nothing left running, --local-ranks-filter narrows the console
// by local rank while the output files keep every rank, and --result-file says how the job
// and each rank ended; before the teardown of --timeout or of a stall past
// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS the stack report names the collective a C rank waits in
// and the C function another is stuck in. The error files' tracebacks and the
// stack report of Python ranks are checked in tests/python (test_failures.py,
// test_stacks.py). Every wait has a deadline.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "tests/support/processes.h"

using namespace hvdrun::testing;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST_CASE("timeout: --timeout ends a job whose ranks hang with exit 124 and nothing left running") {
  TempDir tmp("it");
  const std::string result = tmp.path() + "/result.json";
  const std::string marker = unique_marker();
  // The ranks ignore SIGTERM: the teardown must go on to SIGKILL after the kill grace.
  const auto t0 = Clock::now();
  Hvdrun h({"-np", "2", "--timeout", "2", "--kill-grace", "1", "--result-file", result, "sh", "-c",
            "trap '' TERM; echo ready; while :; do sleep 1; done"},
           {marker});
  CHECK(h.wait(7s) == 124);  // within timeout + 5 s
  CHECK(ms_since(t0) < 7000);
  CHECK(count(h.out, "ready") == 2);
  CHECK(count(h.err, "hvdrun: the job ran past --timeout 2 s; stopped 2 running ranks") == 1);
  CHECK(wait_none_with(marker, 2s));
  const std::string json = read_file(result);
  CHECK(count(json, "\"exit_code\": 124") == 1);
  CHECK(count(json, "\"cause\": \"timeout\"") == 1);
  CHECK(count(json, "\"signal\": 9, \"cause\": \"stopped\"") == 2);
}

TEST_CASE("stacks: a C rank's collective and another's C frame are reported before a teardown") {
  const std::string marker = unique_marker();
  const auto t0 = Clock::now();
  // Rank 1 blocks in stuck_in_c(); rank 0 waits in an allreduce that rank 1 never issues.
  const std::string worker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_c_worker";
  Hvdrun h({"-np", "2", "--timeout", "3", worker, "stuck"}, {marker});
  CHECK(h.wait(10s) == 124);
  CHECK(ms_since(t0) < 8000);  // within timeout + 5 s, the report included
  INFO(h.err);
  CHECK(count(h.out, "ready") == 2);
  CHECK(count(h.err, "hvdrun: where the ranks are (--timeout 3 s):\n") == 1);
  CHECK(count(h.err, "\nrank 0: runtime_c_worker(main+") == 1);
  CHECK(count(h.err, " -> allreduce #0 float32[4] waiting ") == 1);
  CHECK(count(h.err, "\nrank 1: runtime_c_worker(stuck_in_c+") == 1);
  CHECK(count(h.err, "stuck_in_c+0x") >= 2);  // the summary and the frame below it
  CHECK(count(h.err, ", no collective\n") == 1);
  // The report comes before the teardown's message.
  CHECK(h.err.find("where the ranks are") < h.err.find("ran past --timeout 3 s"));
  CHECK(wait_none_with(marker, 2s));

  // Rank 0 ends its stall past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: the report says where
  // rank 1 is before the failure stops the job. Behind a wrapper shell, its child answers.
  Hvdrun stall({"-np", "2", "-x", "HOROVOD_STALL_CHECK_TIME_SECONDS=1", "-x",
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2", "sh", "-c", worker + " stuck; exit $?"},
               {marker});
  CHECK(stall.wait(15s) == 70);
  INFO(stall.err);
  CHECK(count(stall.err,
              "hvdrun: where the ranks are (rank 0 ended a stall past "
              "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS):\nrank 1: "
              "runtime_c_worker(stuck_in_c+") == 1);
  CHECK(stall.err.find("where the ranks are") <
        stall.err.find("hvdrun: rank 0 on host localhost exited with code 70"));
  CHECK(wait_none_with(marker, 2s));
}

TEST_CASE("local-ranks-filter: the console shows local rank 0 of each host, the files all") {
  TempDir tmp("it");
  const std::string dir = tmp.path() + "/logs";
  // Two hosts of this machine: ranks 0-3 on localhost, 4-5 on 127.0.0.1.
  Hvdrun h({"-np", "6", "-H", "localhost:4,127.0.0.1:2", "--local-ranks-filter", "0",
            "--output-filename", dir, "sh", "-c",
            "echo out $HVDRUN_RANK; echo err $HVDRUN_RANK >&2"});
  REQUIRE(h.wait() == 0);
  auto out = lines(h.out);
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<std::string>{"[0]<stdout>:out 0", "[4]<stdout>:out 4"});
  auto err = lines(without_outside_connections(h.err));
  std::sort(err.begin(), err.end());
  CHECK(err == std::vector<std::string>{"[0]<stderr>:err 0", "[4]<stderr>:err 4"});
  for (int r = 0; r < 6; ++r) {
    const std::string rd = dir + "/rank." + std::to_string(r);
    CHECK(read_file(rd + "/stdout") == "out " + std::to_string(r) + "\n");
    CHECK(read_file(rd + "/stderr") == "err " + std::to_string(r) + "\n");
  }
  // With --ranks-filter too, a rank shows when both name it: local rank 0 and rank 4.
  Hvdrun both({"-np", "6", "-H", "localhost:4,127.0.0.1:2", "--local-ranks-filter", "0",
               "--ranks-filter", "3-5", "sh", "-c", "echo out $HVDRUN_RANK"});
  REQUIRE(both.wait() == 0);
  CHECK(lines(both.out) == std::vector<std::string>{"[4]<stdout>:out 4"});
}
