// Each rank's environment: the base (the launcher's whole environment for a local host; a
// documented forwarded set for a remote one), then the user's -x values, then the per-rank
// contract of DESIGN.md applied last so that a stale value in the launching shell never
// wins. The job secret reaches ranks only here, never on a command line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hostfile/placement.h"

namespace hvdrun::launcher {

/// An environment as an ordered list of NAME=VALUE entries with unique names.
class EnvList {
 public:
  EnvList() = default;
  /// Copies a NULL-terminated `environ`-style array (entries without '=' are skipped).
  static EnvList from_environ(char* const* env);
  /// Sets NAME to VALUE, replacing an earlier value in place.
  void set(std::string_view name, std::string_view value);
  /// Adds a NAME=VALUE entry (as from -x); returns false when it has no '=' or no name.
  bool set_entry(std::string_view entry);
  /// The value of NAME, or nullptr.
  const std::string* get(std::string_view name) const;
  /// The entries, NAME=VALUE each, in first-set order.
  const std::vector<std::string>& entries() const { return entries_; }

 private:
  std::vector<std::string> entries_;
};

/// Names forwarded to remote hosts by default: PATH, LD_LIBRARY_PATH, PYTHONPATH,
/// VIRTUAL_ENV, CONDA_PREFIX and every name starting with CUDA_, NCCL_, HOROVOD_,
/// HVDRUN_ or OMP_.
bool forwarded_by_default(std::string_view name);

/// The base environment of a host: all of `launcher_env` for a local host, the forwarded
/// subset for a remote one; then each -x item (`NAME` takes the launcher's value and is
/// skipped when unset there, `NAME=VALUE` sets it).
EnvList host_base_env(char* const* launcher_env, bool local_host,
                      const std::vector<std::string>& user_env);

/// The job-wide values every rank's environment is built from.
struct JobEnv {
  int size = 0;
  /// Address and port where ranks on this host reach the rendezvous server.
  std::string rendezvous_addr;
  int rendezvous_port = 0;
  /// The per-job secret (HVDRUN_SECRET).
  std::string secret;
  /// torch.distributed's MASTER_ADDR / MASTER_PORT (rank 0's host, a free port there).
  std::string master_addr;
  int master_port = 0;
  /// Port of the Horovod gloo-mode HTTP rendezvous (same address as the rendezvous).
  int horovod_port = 0;
  /// Hosts in the job (GROUP_WORLD_SIZE).
  int num_hosts = 1;
  /// --start-timeout in seconds.
  int start_timeout_s = 30;
  /// The elastic generation (HVDRUN_GENERATION).
  int generation = 0;
  /// --network-interface, or empty.
  std::string network_interface;
  /// The interface of this host toward the launcher, as its agent found it (empty when it
  /// could not tell): HOROVOD_GLOO_IFACE and NCCL_SOCKET_IFNAME unless the rank's
  /// environment names them already or --network-interface is given.
  std::string host_interface;
};

/// `base` plus the per-rank contract for `slot` on the host named `host_name` (as the user
/// wrote it): HVDRUN_*, then HOROVOD_* (as horovodrun's Gloo mode sets them) and the
/// torch.distributed names from compat::compat_env. These are applied last; compat's
/// tuning defaults (PYTHONUNBUFFERED, OMP_NUM_THREADS, ...) only where `base` has none.
EnvList rank_env(const EnvList& base, const hostfile::RankSlot& slot, const std::string& host_name,
                 const JobEnv& job);

}  // namespace hvdrun::launcher
