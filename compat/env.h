// The environment that lets unmodified Horovod (gloo mode) and torch.distributed
// (`init_method="env://"`) programs run under hvdrun: the variables horovodrun and
// torchrun would set for a rank, computed from the placement and the addresses the
// launcher chose. Pure functions; the host queries that feed them (a free port, the
// interface toward the launcher) are launcher/plan/local_host.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hostfile/placement.h"

namespace hvdrun::compat {

/// Addresses a rank's host sees, which the launcher/agent determines per host.
struct HostEndpoints {
  /// Horovod HTTP rendezvous as reached from this host (HOROVOD_GLOO_RENDEZVOUS_ADDR).
  std::string horovod_rendezvous_addr;
  /// Port of that rendezvous (HOROVOD_GLOO_RENDEZVOUS_PORT).
  std::uint16_t horovod_rendezvous_port = 0;
  /// Rank 0's host as this host reaches it (MASTER_ADDR).
  std::string master_addr;
  /// A port free on rank 0's host, the same for every rank (MASTER_PORT).
  std::uint16_t master_port = 0;
  /// Interface of this host that carries job traffic (HOROVOD_GLOO_IFACE,
  /// NCCL_SOCKET_IFNAME); empty leaves both unset.
  std::string iface;
  /// HOROVOD_GLOO_TIMEOUT_SECONDS; empty leaves it unset (Horovod then waits 30 s).
  /// horovodrun sets it only from --gloo-timeout-seconds.
  std::optional<int> gloo_timeout_s;
};

/// One rank's compatibility variables, in a fixed order (stable for tests and logs).
struct CompatEnv {
  /// Rank coordinates and addresses: applied after the inherited environment and -x, so
  /// a stale value in the launching shell never wins.
  std::vector<std::pair<std::string, std::string>> set;
  /// Tuning defaults (OMP_NUM_THREADS=1 when ranks share a host, PYTHONUNBUFFERED=1,
  /// the interface names): applied only when the rank's environment (inherited + -x)
  /// does not already name them, so the user's choice wins.
  std::vector<std::pair<std::string, std::string>> defaults;
};

/// The Horovod gloo-mode and torch.distributed variables for `rank` of `placement`.
/// `set` holds HOROVOD_HOSTNAME, HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
/// HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE,
/// HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT, HOROVOD_CONTROLLER=gloo,
/// HOROVOD_CPU_OPERATIONS=gloo, [HOROVOD_GLOO_TIMEOUT_SECONDS], RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (index of the rank's host), GROUP_WORLD_SIZE,
/// ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME=default, MASTER_ADDR, MASTER_PORT.
/// `defaults` holds [HOROVOD_GLOO_IFACE, NCCL_SOCKET_IFNAME], [OMP_NUM_THREADS=1 when
/// local_size > 1], PYTHONUNBUFFERED=1. Throws std::out_of_range for a rank outside the
/// placement.
CompatEnv compat_env(const hostfile::Placement& placement, int rank, const HostEndpoints& host);

/// The same for one slot, for callers that hold a RankSlot rather than the placement:
/// `hostname` as the user wrote it, `size` ranks in the job on `num_hosts` hosts.
CompatEnv compat_env(const hostfile::RankSlot& slot, const std::string& hostname, int size,
                     int num_hosts, const HostEndpoints& host);

}  // namespace hvdrun::compat
