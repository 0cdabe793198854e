// Times the Slurm host-list parser on a 10,000-node allocation, the size of a large
// cluster's job: prints the median and worst of many runs for a compressed range
// (`node[00001-10000]`), a list of 10,000 separate names, and the allocation with its
// task counts. Usage: hvdrun_hostlist_bench [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_args.h"

#include "hostfile/scheduler.h"

namespace {

template <typename Fn>
void time_it(const char* what, int runs, Fn fn) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(runs));
  std::size_t hosts = 0;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    hosts = fn();
    auto t1 = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-44s %6zu hosts  median %8.1f us  max %8.1f us\n", what, hosts, us[us.size() / 2],
              us.back());
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = std::max(1, hvdrun::bench::int_arg(argc, argv, 1, 200));
  namespace hf = hvdrun::hostfile;
  const std::string ranged = "node[00001-10000]";
  std::string listed;
  for (int i = 1; i <= 10000; ++i)
    listed += (i > 1 ? "," : "") + std::string("n") + std::to_string(i);
  std::string mixed;
  for (int r = 0; r < 100; ++r) {
    mixed += (r ? "," : "") + std::string("rack") + std::to_string(r) + "-n[001-050,051-100]";
  }
  time_it("expand node[00001-10000]", runs,
          [&] { return hf::expand_slurm_hostlist(ranged).size(); });
  time_it("expand n1,n2,...,n10000", runs,
          [&] { return hf::expand_slurm_hostlist(listed).size(); });
  time_it("expand rack0-n[001-050,051-100],... (100x100)", runs,
          [&] { return hf::expand_slurm_hostlist(mixed).size(); });
  time_it("allocation node[00001-10000] + 8(x10000)", runs,
          [&] { return hf::parse_slurm_allocation(ranged, "8(x10000)").size(); });
  return 0;
}
