// The open-file limit: hvdrun holds a few descriptors per rank and per host, so the usual
// soft limit of 1024 ends a job of a few hundred ranks. hvdrun raises its own soft limit
// to the hard limit at start (as systemd and mpirun do) and gives the programs it starts
// the soft limit it found, so a rank's select() never meets a descriptor above 1023 it
// did not ask for.
#pragma once

#include <string>

namespace hvdrun {

/// Raises this process's soft RLIMIT_NOFILE to its hard limit (at most 1,048,576) and
/// remembers the soft limit it found. Idempotent; failures leave the limit as it was.
void raise_fd_limit();

/// Puts back, in a child between fork and exec, the soft limit raise_fd_limit() found.
/// Async-signal-safe; does nothing when the limit was never raised.
void restore_fd_limit_in_child() noexcept;

/// This process's RLIMIT_NOFILE now (RLIM_INFINITY as the largest value; zeros when it
/// cannot be read).
struct FdLimits {
  /// The soft limit: the most descriptors this process may hold.
  unsigned long long soft = 0;
  /// The hard limit: the most the soft limit may be raised to without privilege.
  unsigned long long hard = 0;
};
FdLimits fd_limits();

/// What to tell a user whose descriptors ran out: the current soft and hard limits and
/// how to raise them ("the open-file limit is 1024 (ulimit -n; hard limit 4096): ...").
std::string fd_limit_advice();

}  // namespace hvdrun
