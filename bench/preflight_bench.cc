// Preflight benchmark body: starts a loopback sshd cluster of N hosts and times, in one
// run, hvdrun's preflight of 1 and of N hosts against N parallel and N sequential
// `ssh -F cfg -o BatchMode=yes nodeK true`, with hvdrun's own CPU time per host.
// Usage: hvdrun_preflight_bench [hosts=16] [rounds=3]   (bench/preflight.sh runs it)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "bench/bench_args.h"
#include "launcher/hosts/preflight.h"
#include "ssh/libssh2_session.h"
#include "tests/support/sshd_cluster.h"

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double self_cpu() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double children_cpu() {
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

pid_t spawn_ssh(const hvdrun::testing::SshdCluster& c, int k) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string host = c.alias(k);
    ::execlp("ssh", "ssh", "-F", c.ssh_config().c_str(), "-o", "BatchMode=yes", host.c_str(),
             "true", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

bool wait_ok(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct Sample {
  double wall = 0;
  double cpu = 0;
};

Sample run_preflight(const hvdrun::testing::SshdCluster& c, int hosts,
                     const std::string& stand_in) {
  auto options = c.options(hosts);
  options.remote_hvdrun = stand_in;
  hvdrun::ssh::Libssh2Connector connector;
  hvdrun::launcher::PreflightSettings settings;
  settings.expected_version = "hvdrun bench";
  double cpu0 = self_cpu();
  auto t0 = Clock::now();
  auto report = hvdrun::launcher::preflight(options, connector, settings);
  Sample s{seconds_since(t0), self_cpu() - cpu0};
  if (!report.ok()) {
    std::fprintf(stderr, "preflight failed\n");
    std::exit(1);
  }
  return s;  // sessions close here, outside the timing
}

Sample run_ssh(const hvdrun::testing::SshdCluster& c, int hosts, bool parallel) {
  double cpu0 = children_cpu();
  auto t0 = Clock::now();
  std::vector<pid_t> pids;
  for (int k = 1; k <= hosts; ++k) {
    pids.push_back(spawn_ssh(c, k));
    if (!parallel && !wait_ok(pids.back())) std::exit(1);
  }
  if (parallel) {
    for (pid_t p : pids) {
      if (!wait_ok(p)) std::exit(1);
    }
  }
  return Sample{seconds_since(t0), children_cpu() - cpu0};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int hosts = hvdrun::bench::int_arg(argc, argv, 1, 16);
  const int rounds = hvdrun::bench::int_arg(argc, argv, 2, 3);
  spdlog::set_level(spdlog::level::warn);
  if (const char* level = std::getenv("HVDRUN_BENCH_LOG_LEVEL")) {
    spdlog::set_level(spdlog::level::from_str(level));
  }
  ::unsetenv("SSH_AUTH_SOCK");
  hvdrun::testing::SshdCluster cluster(hosts);
  ::setenv("HOME", cluster.dir().c_str(), 1);
  const std::string stand_in =
      cluster.write_file("hvdrun", "#!/bin/sh\necho 'hvdrun bench'\n", 0755);
  // Warm up: record host keys, page in sshd and ssh.
  run_preflight(cluster, hosts, stand_in);
  run_ssh(cluster, hosts, true);

  std::vector<double> one, many, many_cpu, par, seq, ssh_cpu;
  for (int r = 0; r < rounds; ++r) {
    one.push_back(run_preflight(cluster, 1, stand_in).wall);
    auto m = run_preflight(cluster, hosts, stand_in);
    many.push_back(m.wall);
    many_cpu.push_back(m.cpu);
    auto p = run_ssh(cluster, hosts, true);
    par.push_back(p.wall);
    ssh_cpu.push_back(p.cpu);
    seq.push_back(run_ssh(cluster, hosts, false).wall);
  }
  const double m = median(many), p = median(par);
  std::printf("hosts=%d rounds=%d (medians)\n", hosts, rounds);
  std::printf("hvdrun preflight, 1 host      : %.3f s\n", median(one));
  std::printf("hvdrun preflight, %2d hosts    : %.3f s  (%.2fx one host)\n", hosts, m,
              m / median(one));
  std::printf("ssh true, %2d parallel         : %.3f s\n", hosts, p);
  std::printf("ssh true, %2d sequential       : %.3f s\n", hosts, median(seq));
  std::printf("ratio hvdrun / parallel ssh   : %.2fx  (target <= 0.85x)\n", m / p);
  std::printf("ratio hvdrun / sequential ssh : %.2fx\n", m / median(seq));
  std::printf("hvdrun CPU per host           : %.1f ms  (ssh client CPU per host: %.1f ms)\n",
              1000.0 * median(many_cpu) / hosts, 1000.0 * median(ssh_cpu) / hosts);
  return 0;
}
