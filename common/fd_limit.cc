// raise_fd_limit and its companions (fd_limit.h).
#include "common/fd_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>

namespace hvdrun {
namespace {

constexpr rlim_t kCeiling = rlim_t{1} << 20;
// The soft limit found at start, or RLIM_INFINITY while it has not been raised. Read in
// forked children: a lock-free atomic, set before any child is started.
std::atomic<rlim_t> g_original_soft{RLIM_INFINITY};
std::atomic<bool> g_raised{false};

std::string limit_text(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }

}  // namespace

void raise_fd_limit() {
  if (g_raised.exchange(true)) return;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t want = std::min(lim.rlim_max, kCeiling);
  if (want <= lim.rlim_cur) return;
  const rlim_t found = lim.rlim_cur;
  lim.rlim_cur = want;
  if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) g_original_soft = found;
}

void restore_fd_limit_in_child() noexcept {
  const rlim_t soft = g_original_soft.load();
  if (soft == RLIM_INFINITY) return;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  lim.rlim_cur = soft;
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
}

FdLimits fd_limits() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return {};
  return {lim.rlim_cur, lim.rlim_max};
}

std::string fd_limit_advice() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return "check the open-file limit (ulimit -n)";
  return "the open-file limit here is " + limit_text(lim.rlim_cur) + " (ulimit -n; hard limit " +
         limit_text(lim.rlim_max) +
         ", which hvdrun raises its own limit to): raise the hard limit for this user "
         "(ulimit -Hn, /etc/security/limits.conf or LimitNOFILE= in a systemd unit), or "
         "start fewer ranks on this host";
}

}  // namespace hvdrun
