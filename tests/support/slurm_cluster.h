// The loopback Slurm cluster for tests and benchmarks: Debian's slurmctld and one
// `slurmd -N nodeK` per node (NodeName=node1..N, NodeAddr=127.0.0.(K+1), a port each),
// with SlurmdParameters=config_overrides, ProctrackType=proctrack/linuxproc and
// TaskPlugin=task/none, state, spool and logs in a temp dir. munged is started when none
// runs (and then left running: other clusters of the same machine use it). Node names match
// the SSH cluster's aliases (SshdCluster: node1 -> 127.0.0.2, ...), so both launch methods
// can be compared on one allocation.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hvdrun::testing {

/// A running loopback Slurm. Needs root and the slurmctld, slurmd, slurm-client and munge
/// packages. Destruction stops every daemon it started, and every process they started, by
/// pid, and removes the temp dir.
class SlurmCluster {
 public:
  /// Whether the Slurm and munge programs are installed.
  static bool available();

  /// Starts the daemons and waits, under a deadline, until every node is idle. Throws
  /// std::runtime_error with the daemons' logs when they do not come up.
  explicit SlurmCluster(int nodes = 3, int cpus_per_node = 2);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  /// The temp dir (slurm.conf, state, spool, logs).
  const std::string& dir() const { return dir_; }
  /// Path of slurm.conf.
  const std::string& conf() const { return conf_; }
  /// Environment entries for the Slurm client programs (SLURM_CONF=...).
  std::vector<std::string> env() const;
  /// `env SLURM_CONF=... ARGS...`: argv for running a Slurm client with this cluster.
  std::vector<std::string> client(std::vector<std::string> args) const;
  /// The output of `squeue -h -s` (job steps still known to the controller).
  std::string steps() const;
  /// Live processes started by this cluster's daemons (slurmstepd and what it runs).
  std::vector<pid_t> job_processes() const;

 private:
  void teardown();
  void write_config(int nodes, int cpus_per_node);
  void wait_controller();
  void wait_idle(int nodes);
  std::string logs() const;

  std::string dir_;
  std::string conf_;
  std::string marker_;
  std::vector<pid_t> daemons_;
  int nodes_ = 0;
};

}  // namespace hvdrun::testing
