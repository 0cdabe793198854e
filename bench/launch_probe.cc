// Two small tools for bench/scale_launch.sh, in one program:
//
//   hvdrun_launch_probe login MS HOST CMD...
//     A stand-in for a remote login (`ssh HOST`, `kubectl exec`): waits MS milliseconds,
//     as a login would, then execs CMD on this machine. One exec, no shell, no sleep
//     process: what the benchmark's hosts cost is the launcher's and the agent's share.
//
//   hvdrun_launch_probe measure OUT -- CMD...
//     Runs CMD (the launcher) with its stdout to file OUT and reports, as one line of
//     `key=value` pairs, what the launcher process alone used:
//       wall_ms     from the fork to its exit
//       user_ms     its own user CPU (every thread), its children's excluded
//       sys_ms      its own system CPU
//       hwm_kib     its peak resident set (VmHWM), sampled every 20 ms
//       fds         the most descriptors it held at once, sampled every 50 ms
//       code        its exit status
//     The launcher's own CPU is read from /proc/PID/stat once it has exited but before it
//     is reaped (waitid with WNOWAIT): a zombie's utime/stime are final and exclude its
//     children, which getrusage(RUSAGE_CHILDREN) or wait4's rusage would fold in.
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"

namespace {

using Clock = std::chrono::steady_clock;

int login(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s login MS HOST CMD...\n", argv[0]);
    return 2;
  }
  const int ms = hvdrun::bench::int_arg(argc, argv, 2, 0);
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0) {
  }
  ::execvp(argv[4], argv + 4);
  std::fprintf(stderr, "%s: cannot run %s: %s\n", argv[0], argv[4], std::strerror(errno));
  return 127;
}

// utime and stime (fields 14 and 15 of /proc/PID/stat) in milliseconds.
bool self_cpu_ms(pid_t pid, long& user, long& sys) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // Fields from 3 (state) on; utime is field 14.
  for (int i = 3; i < 14; ++i) rest >> field;
  long ut = 0;
  long st = 0;
  rest >> ut >> st;
  const long tick = ::sysconf(_SC_CLK_TCK);
  user = ut * 1000 / tick;
  sys = st * 1000 / tick;
  return static_cast<bool>(rest);
}

long vm_hwm_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

long open_fds(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  long n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n;
}

int measure(int argc, char** argv) {
  if (argc < 5 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: %s measure OUT -- CMD...\n", argv[0]);
    return 2;
  }
  const int out = ::open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    std::fprintf(stderr, "%s: cannot create %s: %s\n", argv[0], argv[2], std::strerror(errno));
    return 2;
  }
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    ::dup2(out, 1);
    ::execvp(argv[4], argv + 4);
    std::fprintf(stderr, "%s: cannot run %s: %s\n", argv[0], argv[4], std::strerror(errno));
    ::_exit(127);
  }
  long hwm = 0;
  long fds = 0;
  int tick = 0;
  siginfo_t info{};
  for (;;) {
    info.si_pid = 0;
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      break;
    }
    hwm = std::max(hwm, vm_hwm_kib(pid));
    if (tick++ % 5 == 0) fds = std::max(fds, open_fds(pid));
    ::usleep(10000);
  }
  const auto wall = Clock::now() - start;
  long user = -1;
  long sys = -1;
  self_cpu_ms(pid, user, sys);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::printf(
      "wall_ms=%lld user_ms=%ld sys_ms=%ld hwm_kib=%ld fds=%ld code=%d\n",
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(wall).count()),
      user, sys, hwm, fds, code);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "login") == 0) return login(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "measure") == 0) return measure(argc, argv);
  std::fprintf(stderr,
               "usage: %s login MS HOST CMD...\n"
               "       %s measure OUT -- CMD...\n",
               argv[0], argv[0]);
  return 2;
}
