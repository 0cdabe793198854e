// Host sources of batch schedulers: the allocation a job runs in, read from the variables
// Slurm, PBS/Torque, LSF and SGE set inside it. One parser per format, pure functions over
// text (the PBS and SGE readers also read the file their variable names). Every malformed
// value throws hvdrun::UsageError naming the variable, the offending part and the form
// expected.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hosts.h"

namespace hvdrun::hostfile {

/// Expands a Slurm host list (`SLURM_JOB_NODELIST`): names and bracketed ranges separated
/// by commas or whitespace, as in `gpu-a[001-003,007],gpu-b5` or `n[1-2]-ib[3-4]` (several
/// bracket groups give every combination, the first group varying slowest). Zero padding
/// of a range's low bound is kept (`n[08-10]` is n08 n09 n10). `variable` names the source
/// in messages.
std::vector<std::string> expand_slurm_hostlist(std::string_view text,
                                               std::string_view variable = "SLURM_JOB_NODELIST");

/// Expands `SLURM_TASKS_PER_NODE` (`4(x2),2,1(x2)` is 4 4 2 1 1).
std::vector<int> expand_slurm_tasks_per_node(std::string_view text);

/// The Slurm allocation: the nodes of `nodelist` with the task counts of `tasks_per_node`,
/// which must name as many nodes.
std::vector<HostSlots> parse_slurm_allocation(std::string_view nodelist,
                                              std::string_view tasks_per_node);

/// PBS/Torque's `PBS_NODEFILE` contents: one host per line, one line per slot; a host's
/// lines are counted wherever they are, hosts kept in the order they first appear.
std::vector<HostSlots> parse_pbs_nodefile_text(std::string_view text, std::string_view filename);

/// LSF's `LSB_MCPU_HOSTS`: `hostA 4 hostB 2`, host and slot count alternating.
std::vector<HostSlots> parse_lsf_mcpu_hosts(std::string_view text);

/// SGE's `PE_HOSTFILE` contents: `host slots queue processor-range` per line (only the first
/// two fields are read); a host on several lines (several queues) gets the sum.
std::vector<HostSlots> parse_sge_pe_hostfile_text(std::string_view text, std::string_view filename);

/// A scheduler's allocation.
struct Allocation {
  /// "slurm", "pbs", "lsf" or "sge".
  std::string scheduler;
  /// The variables it was read from, for messages ("SLURM_JOB_NODELIST=...").
  std::string origin;
  /// The hosts with their slots, in the scheduler's order.
  std::vector<HostSlots> hosts;
};

/// Reads an environment variable; nullptr when unset.
using GetEnv = std::function<const char*(const char*)>;

/// The allocation this process runs in, detected from the environment in the order Slurm
/// (`SLURM_JOB_NODELIST`), PBS (`PBS_NODEFILE`), LSF (`LSB_MCPU_HOSTS`), SGE (`PE_HOSTFILE`);
/// nullopt outside of any. A set but malformed variable (or an unreadable file) is a
/// UsageError.
std::optional<Allocation> detect_allocation(const GetEnv& getenv);

}  // namespace hvdrun::hostfile
