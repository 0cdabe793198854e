// Start-up benchmark driver: runs N rank processes of hvdrun_bench_rank against an
// in-process rendezvous server (no launcher) and reports the wall time from the first
// spawn to the last exit, plus rank 0's own figure.
//   hvdrun_rendezvous_bench MODE NP [ARGS...]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/bench_args.h"
#include "tests/runtime/job_harness.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODE NP [ARGS...]\n", argv[0]);
    return 2;
  }
  std::string self = argv[0];
  std::string rank_prog = self.substr(0, self.rfind('/') + 1) + "hvdrun_bench_rank";
  hvdrun::test::JobSpec spec;
  spec.np = hvdrun::bench::int_arg(argc, argv, 2, 0);
  spec.argv = {rank_prog, argv[1]};
  for (int i = 3; i < argc; ++i) spec.argv.emplace_back(argv[i]);
  spec.env = {{"HVDRUN_START_TIMEOUT", "120"}, {"HVDRUN_NCCL", "off"}};
  spec.deadline = std::chrono::seconds(300);
  auto r = hvdrun::test::run_job(spec);
  if (!r.ok()) {
    std::fprintf(stderr, "job failed:\n%s", r.dump().c_str());
    return 1;
  }
  std::string rank0;
  for (const auto& rr : r.ranks)
    if (rr.rank == 0) rank0 = rr.err;
  auto pos = rank0.find("result ");
  std::printf("mode=%s np=%d wall_ms=%lld %s", argv[1], spec.np,
              static_cast<long long>(r.elapsed.count()),
              pos == std::string::npos ? "\n" : rank0.substr(pos + 7).c_str());
  return 0;
}
