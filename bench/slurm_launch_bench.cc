// Launch inside a Slurm allocation: brings up the loopback Slurm (3 nodes x 2 CPUs) and the
// loopback SSH cluster with the same node names, then times, interleaved, inside one
// `salloc -N3 -n6` each:
//   srun -n6 true                          Slurm's own launch of 6 tasks
//   hvdrun --launcher slurm -np 6 true     one srun step of 3 agents, 2 ranks each
//   hvdrun --launcher ssh -np 6 true       3 SSH logins (node1..node3)
//   true                                   the allocation alone, subtracted from the others
// and prints the median of each in ms. Usage: hvdrun_slurm_launch_bench [reps=9]
// (bench/slurm_launch.sh builds and runs it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_args.h"

#include "tests/support/processes.h"
#include "tests/support/slurm_cluster.h"
#include "tests/support/sshd_cluster.h"

using Clock = std::chrono::steady_clock;
using hvdrun::testing::hvdrun_binary;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = std::max(1, hvdrun::bench::int_arg(argc, argv, 1, 9));
  hvdrun::testing::SlurmCluster slurm(3, 2);
  hvdrun::testing::SshdCluster ssh(4);
  struct Method {
    const char* name;
    std::vector<std::string> command;
    std::vector<double> ms;
  };
  std::vector<Method> methods = {
      {"salloc alone (true)", {"true"}, {}},
      {"srun -n6 true", {"srun", "-n6", "true"}, {}},
      {"hvdrun --launcher slurm -np 6 true",
       {hvdrun_binary(), "--launcher", "slurm", "-np", "6", "true"},
       {}},
      {"hvdrun --launcher ssh -np 6 true",
       {hvdrun_binary(), "--launcher", "ssh", "--ssh-config", ssh.ssh_config(), "-np", "6", "true"},
       {}},
  };
  for (int r = 0; r < reps; ++r) {
    for (auto& m : methods) {
      std::vector<std::string> cmd = slurm.client({"salloc", "-N3", "-n6", "--quiet"});
      cmd.insert(cmd.end(), m.command.begin(), m.command.end());
      const auto t0 = Clock::now();
      std::string out;
      int status = hvdrun::testing::run_process(cmd, &out);
      m.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      if (status != 0) {
        std::fprintf(stderr, "%s failed (status %d): %s\n", m.name, status, out.c_str());
        return 1;
      }
    }
  }
  const double base = median(methods[0].ms);
  std::printf(
      "%d repetitions, 3 nodes x 2 ranks, medians (allocation subtracted in the last column)\n",
      reps);
  for (const auto& m : methods) {
    std::printf("%-40s %8.1f ms %8.1f ms\n", m.name, median(m.ms), median(m.ms) - base);
  }
  return 0;
}
