// What a shared-memory wait is made of (runtime/shm/shm_comm_impl.h): a pause while spinning, the
// futex the waiters of a phase sleep on (shared between processes: no private flag), a
// pidfd to notice a peer's exit, and the number of CPUs this process may run on (whether
// spinning can pay). Internal to libhvdrun.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hvdrun::runtime::shm {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

inline long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, val, ts, nullptr, 0);
}

inline int pidfd_open(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

inline int online_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace hvdrun::runtime::shm
