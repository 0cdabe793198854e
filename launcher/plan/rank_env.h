// Each rank's environment. Where a variable comes from depends on how its host is reached
// (EnvSource): a local rank inherits the launcher's whole environment; an SSH (or srun)
// rank starts from its host's own login variables (HOME, USER, LOGNAME, SHELL, LANG,
// LC_*) with the launcher's forwarded set on top; an exec: rank (a container) starts from
// the whole environment its agent got, with the forwarded set on top except the paths of
// the container's own file system. Then the user's -x values, then the per-rank contract
// of DESIGN.md, applied last so that a stale value in the launching shell never wins.
// Defaults (LANG and LC_* from the launcher, the tuning variables) fill only names nothing
// else set. The launcher builds the lists (RankEnv); the agent, which alone sees its host's
// variables, merges them (merge_rank_env). The job secret reaches ranks only here, never
// on a command line.
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
/// HVDRUN_, OMP_, TORCH_, UCX_ or FI_.
bool forwarded_by_default(std::string_view name);

/// The paths among the forwarded names (PATH, LD_LIBRARY_PATH, PYTHONPATH, VIRTUAL_ENV,
/// CONDA_PREFIX): they name the launcher's file system, so an exec: host (a container,
/// with a file system of its own) keeps its own values.
bool names_a_path(std::string_view name);

/// Where a host's ranks get the variables the launcher does not set.
enum class EnvSource {
  launcher,   ///< a local host: the launcher's whole environment
  login,      ///< SSH or srun: the host's own login variables, the forwarded set on top
  container,  ///< exec: everything the agent got, the forwarded set but the paths on top
  node,       ///< join: everything the node's own hvdrun got, only -x items on top
};

/// The source for a host reached by `method` ("local", "ssh", "slurm", "exec" or "join").
EnvSource env_source(std::string_view method);

/// The base environment of a host: all of `launcher_env` for a local host, the forwarded
/// subset for a login one, the forwarded subset without the paths for a container; then
/// each -x item (`NAME` takes the launcher's value and is skipped when unset there,
/// `NAME=VALUE` sets it, `PREFIX*` takes every launcher variable whose name starts with
/// PREFIX), which goes over the host's own values too.
EnvList host_base_env(char* const* launcher_env, EnvSource source,
                      const std::vector<std::string>& user_env);

/// The -x items of `user_env` that name a variable (no '=') unset in `launcher_env`, or a
/// pattern (`PREFIX*`) that no variable there matches, each once: no rank gets them, and
/// the user is told so.
std::vector<std::string> unset_env_names(char* const* launcher_env,
                                         const std::vector<std::string>& user_env);

/// Which of its agent's own variables a host's ranks start from: none for a local host,
/// HOME, USER, LOGNAME, SHELL, LANG and LC_* (a trailing '*' names a prefix) for a login,
/// "*" (all) for a container.
std::vector<std::string> host_variables(EnvSource source);

/// The launcher's LANG and LC_* for a login host: a rank gets them where its host's login
/// sets none (an OpenSSH client sends them by default).
EnvList host_defaults(char* const* launcher_env, EnvSource source);

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
  /// The rank joins a job whose other ranks keep running in their processes (in-process
  /// elastic recovery): HVDRUN_JOINING=1, so that it runs alone until hvd.elastic.run.
  bool joining = false;
  /// --network-interface, or empty.
  std::string network_interface;
  /// The interface of this host toward the launcher, as its agent found it (empty when it
  /// could not tell): HOROVOD_GLOO_IFACE and NCCL_SOCKET_IFNAME unless the rank's
  /// environment names them already or --network-interface is given.
  std::string host_interface;
};

/// A rank's environment as the launcher sends it to the agent.
struct RankEnv {
  /// Set over the host's own variables.
  EnvList set;
  /// Set only where neither `set` nor the host's own variables name them.
  EnvList defaults;
};

/// `base` plus the per-rank contract for `slot` on the host named `host_name` (as the user
/// wrote it): HVDRUN_*, then HOROVOD_* (as horovodrun's Gloo mode sets them) and the
/// torch.distributed names from compat::compat_env, in `set`. compat's tuning defaults
/// (PYTHONUNBUFFERED, OMP_NUM_THREADS, ...) go to `defaults`, unless `base` names them, and
/// so do `host_defaults`.
RankEnv rank_env(const EnvList& base, const hostfile::RankSlot& slot, const std::string& host_name,
                 const JobEnv& job, const EnvList& host_defaults = {});

/// What the agent starts a rank with: those of `host_environ` (its own environment) that
/// `host_variables` names, then `set` over them, then each of `defaults` whose name is
/// still unset. Entries are NAME=VALUE.
EnvList merge_rank_env(char* const* host_environ, const std::vector<std::string>& host_variables,
                       const std::vector<std::string>& set,
                       const std::vector<std::string>& defaults);

}  // namespace hvdrun::launcher
