// torchrun's flags (`--nnodes`, `--node-rank`, `--rdzv-endpoint`, `--nproc-per-node`, ...)
// and join mode's own (`--rdzv-timeout`, `--secret-file`): turned into LaunchOptions, with
// what is not supported refused before anything starts (docs/kubernetes.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/plan/launch_options.h"

namespace hvdrun::cli {

/// The torchrun-style flags as given on the command line: long name -> value ("" for a
/// switch).
using GivenFlags = std::map<std::string, std::string>;

/// The long names of those flags (without dashes), as in the option table.
const std::vector<const char*>& join_flag_names();

/// The variable through which torchrun (and a PyTorchJob) passes `name`'s value:
/// PET_ and the name upper-cased with '_' for '-' ("nnodes" -> "PET_NNODES").
std::string pet_variable(const std::string& name);

/// What to do instead of torchrun's flag `name` ("--log-dir" or "--log_dir") that hvdrun
/// does not take: a whole message ("torchrun's --log-dir is not supported: ..."), or empty
/// when `name` is not one of torchrun's.
std::string torchrun_flag_advice(std::string name);

/// Applies `given` to `o` and `command` (the user's command: with `-m` it is a Python
/// module run by python3 -m, and a first word ending in `.py` runs under python3 unless
/// --no-python). With none of the flags given,
/// nothing changes. One node (--standalone, or --nnodes 1 without an endpoint) is a local
/// job of --nproc-per-node ranks; more are join mode (o.join), which needs node 0's
/// endpoint, this node's rank and the job's secret (--secret-file, else `secret_env`, the
/// value of HVDRUN_JOB_SECRET). Flags not given take torchrun's PET_ variables through
/// `getenv`. Throws UsageError for what is not supported or missing.
void apply_join(GivenFlags given, launcher::LaunchOptions& o, std::vector<std::string>& command,
                const char* (*getenv)(const char*));

}  // namespace hvdrun::cli
