// hvdrun's option table and the --help text made from it.
#include "cli/option_table.h"

#include <array>
#include <csignal>
#include <cstring>
#include <stdexcept>

#include "cli/options.h"
#include "common/exit_status.h"
#include "compat/horovod_flags.h"

namespace hvdrun::cli {
namespace {

// hvdrun's own options; options() adds horovodrun's tuning flags (compat/horovod_flags.h)
// before the "Other" group.
const std::array kOwnOptions = {
    OptSpec{"num-proc", 0, true, "N", "Job",
            "number of ranks, or auto: one per GPU (default: all slots)", kRun | kCheck},
    OptSpec{"hosts", 'H', false, "HOST[:SLOTS],...", "Job",
            "hosts with slots, e.g. node1:4,[fe80::1]:2", kRun | kCheck},
    OptSpec{"hostfile", 0, false, "FILE", "Job", "read hosts from FILE ('host slots=N' lines)",
            kRun | kCheck},
    OptSpec{"env", 'x', false, "NAME[=VALUE]", "Job",
            "set or forward NAME in every rank; NAME* forwards every match (repeatable)", kRun},
    OptSpec{"env-file", 0, false, "FILE", "Job",
            "set each KEY=VALUE line of FILE in every rank, as -x does", kRun},
    OptSpec{"config-file", 0, false, "FILE", "Job",
            "horovodrun's YAML config of Horovod settings; flags given win over it", kRun},
    OptSpec{"kill-grace", 0, false, "SEC", "Job",
            "seconds between SIGTERM and SIGKILL when ranks stop (default 3)", kRun},
    OptSpec{"start-timeout", 0, false, "SEC", "Job", "start deadline in seconds (default 30)",
            kRun | kCheck},
    OptSpec{"timeout", 0, false, "SEC", "Job",
            "stop the whole job after SEC seconds and exit 124 (default: no limit)", kRun},
    OptSpec{"result-file", 0, false, "FILE", "Job",
            "write the verdict and every rank's end to FILE as JSON when the job ends", kRun},
    OptSpec{"network-interface", 0, false, "IF", "Job", "interface whose address the ranks use",
            kRun},
    OptSpec{"network-interfaces", 0, false, "IF,IF", "Job",
            "on each host, the first of these present carries NCCL's and Gloo's traffic", kRun},
    OptSpec{"launcher", 0, false, "METHOD", "Job",
            "auto|ssh|slurm|exec:COMMAND (how agents reach hosts; default auto)", kRun | kCheck},
    OptSpec{"dry-run", 0, false, nullptr, "Job",
            "print the launch method and RANK HOST LOCAL_RANK per rank; start nothing", kRun},
    OptSpec{"bind-to", 0, false, "WHAT", "Job",
            "none|core|l3|numa|socket: bind each rank to its cores or their level (default none)",
            kRun},
    OptSpec{"map-by", 0, false, "WHAT", "Job",
            "slot|numa|socket: the order ranks take cores in when binding (default slot)", kRun},
    OptSpec{"cpus-per-rank", 0, false, "N", "Job", "cores each bound rank gets (default 1)", kRun},
    OptSpec{"gpus-per-rank", 0, false, "N", "Job",
            "give each rank N GPUs of its host as its own CUDA_VISIBLE_DEVICES", kRun},
    OptSpec{"include", 0, false, "HOSTS", "Job",
            "use only these hosts (and GPU slots): node1:0,2@node2, as DeepSpeed's", kRun},
    OptSpec{"exclude", 0, false, "HOSTS", "Job",
            "leave out these hosts (or GPU slots): node1:0,2@node2, as DeepSpeed's", kRun},
    OptSpec{"report-bindings", 0, false, nullptr, "Job",
            "print each rank's cores, NUMA node, GPU and NIC before the start", kRun},
    OptSpec{"min-np", 0, false, "N", "Elastic",
            "elastic mode: fewest ranks; fewer usable slots end the job (also --min-num-proc)",
            kRun},
    OptSpec{"max-np", 0, false, "N", "Elastic",
            "elastic mode: most ranks (default: all slots; also --max-num-proc)", kRun},
    OptSpec{"host-discovery-script", 0, false, "PATH", "Elastic",
            "elastic mode: prints 'host' or 'host:slots' lines; run at start, after each "
            "failure and every HVDRUN_DISCOVERY_INTERVAL seconds (3)",
            kRun},
    OptSpec{"slots-per-host", 0, false, "N", "Elastic",
            "slots of a discovered host printed without any (default 1)", kRun},
    OptSpec{"reset-limit", 0, false, "N", "Elastic",
            "restarts the whole job may make (default: no limit)", kRun},
    OptSpec{"max-restarts", 0, false, "N", "Elastic", "torchrun's name for --reset-limit", kRun},
    OptSpec{"blacklist-cooldown-range", 0, false, "MIN MAX", "Elastic",
            "seconds a failed host is excluded: MIN, doubling per failure up to MAX "
            "(default 10 300)",
            kRun},
    OptSpec{"elastic-timeout", 0, false, "SEC", "Elastic",
            "how long discovery may fail before the job ends (default 600)", kRun},
    OptSpec{"nnodes", 0, false, "N|MIN:MAX", "Join",
            "torchrun: nodes of a job run on every node; MIN:MAX: elastic, MIN to MAX nodes", kRun},
    OptSpec{"node-rank", 0, false, "I", "Join",
            "torchrun: this node's rank (0: the endpoint's node)", kRun},
    OptSpec{"nproc-per-node", 0, false, "N|gpu|cpu|auto", "Join",
            "torchrun: ranks on each node (default 1); gpu: one per GPU, cpu: one per CPU, auto: "
            "gpu if any, else cpu",
            kRun},
    OptSpec{"rdzv-endpoint", 0, false, "HOST[:PORT]", "Join",
            "torchrun: node 0's address (default port 29400)", kRun},
    OptSpec{"rdzv-id", 0, false, "ID", "Join",
            "torchrun: the job's id on every node (TORCHELASTIC_RUN_ID; default none, a "
            "random UUID with --standalone)",
            kRun},
    OptSpec{"rdzv-backend", 0, false, "NAME", "Join",
            "torchrun: c10d or static (node 0 holds the rendezvous either way)", kRun},
    OptSpec{"rdzv-timeout", 0, false, "SEC", "Join",
            "how long nodes wait for each other to join (default 900)", kRun},
    OptSpec{"master-addr", 0, false, "HOST", "Join",
            "torchrun: node 0's address, as --rdzv-endpoint", kRun},
    OptSpec{"master-port", 0, false, "PORT", "Join", "torchrun: node 0's port (default 29500)",
            kRun},
    OptSpec{"standalone", 0, false, nullptr, "Join", "torchrun: one node, no endpoint", kRun},
    OptSpec{"no-python", 0, false, nullptr, "Join",
            "torchrun: run the command as given, not a .py file under python3", kRun},
    OptSpec{"module", 'm', false, nullptr, "Join",
            "torchrun: the command is a Python module (python3 -m command...)", kRun},
    OptSpec{"secret-file", 0, false, "FILE", "Join",
            "the job's secret, the same on every node (else HVDRUN_JOB_SECRET)", kRun},
    OptSpec{"ssh-port", 'p', false, "PORT", "SSH", "SSH port for every host (overrides config)",
            kRun | kCheck},
    OptSpec{"ssh-identity-file", 'i', false, "FILE", "SSH",
            "key tried before the config's IdentityFile", kRun | kCheck},
    OptSpec{"ssh-config", 0, false, "FILE", "SSH", "ssh config instead of ~/.ssh/config",
            kRun | kCheck},
    OptSpec{"remote-hvdrun", 0, false, "PATH", "SSH", "remote hvdrun (default: this binary's path)",
            kRun | kCheck},
    OptSpec{"output-filename", 0, false, "DIR", "Output", "also write DIR/rank.N/stdout and stderr",
            kRun},
    OptSpec{"prefix-output-with-timestamp", 0, false, nullptr, "Output",
            "prefix each output line with the time", kRun},
    OptSpec{"ranks-filter", 0, false, "LIST", "Output",
            "show only these ranks' output, e.g. 0,3-5 (files keep all)", kRun},
    OptSpec{"local-ranks-filter", 0, false, "LIST", "Output",
            "show only these local ranks' output on every host (files keep all)", kRun},
    OptSpec{"json", 0, false, nullptr, "Output", "print the check report or --dry-run as JSON",
            kRun | kCheck},
    OptSpec{"topology", 0, false, nullptr, "Output",
            "check: print each host's sockets, NUMA nodes, cores, GPUs and NICs instead",
            kCheck | kAgent},
    OptSpec{"verbose", 0, false, nullptr, "Output", "log launch progress (like --log-level info)",
            kRun | kCheck},
    OptSpec{"log-level", 0, false, "LEVEL", "Output", "trace|debug|info|warning|error|critical|off",
            kAll},
    OptSpec{"check-build", 0, false, nullptr, "Other", "show build features (Gloo, NCCL) and exit",
            kRun},
    OptSpec{"version", 'v', false, nullptr, "Other", "print the version and exit", kAll},
    OptSpec{"help", 'h', false, nullptr, "Other", "print this help and exit", kAll},
};

// The option column of --help, e.g. "-H, --hosts HOST[:SLOTS],...".
std::string column(const OptSpec& s) {
  std::string out;
  if (s.single_dash) {
    out = "-np, --" + std::string(s.name);
  } else if (s.short_name) {
    out = std::string("-") + s.short_name + ", --" + s.name;
  } else {
    out = std::string("--") + s.name;
  }
  if (s.arg) out += std::string(" ") + s.arg;
  return out;
}

}  // namespace

// Every option, in the order of the table; built once.
const std::vector<OptSpec>& options() {
  static const std::vector<OptSpec> all = [] {
    std::vector<OptSpec> out;
    bool knobs_added = false;
    for (const auto& s : kOwnOptions) {
      if (!knobs_added && std::strcmp(s.group, "Other") == 0) {
        for (const auto& k : compat::horovod_knobs()) {
          out.push_back(OptSpec{k.option, 0, false, k.arg, "Horovod", k.help, kRun});
        }
        knobs_added = true;
      }
      out.push_back(s);
    }
    return out;
  }();
  return all;
}

const OptSpec& spec_named(std::string_view name) {
  for (const auto& s : options()) {
    if (name == s.name) return s;
  }
  throw std::logic_error("no option " + std::string(name));
}

// How the option is named to the user in messages: its documented primary form.
std::string shown(const OptSpec& s) {
  if (s.single_dash) return "-np";
  if (s.short_name) return std::string("-") + s.short_name + "/--" + s.name;
  return std::string("--") + s.name;
}

std::string help_text() {
  std::string out =
      "Usage:\n"
      "  hvdrun [run] [options] [--] command [args...]\n"
      "  hvdrun check [options]\n"
      "  hvdrun stacks [PID]\n"
      "  hvdrun --check-build | --version | --help\n"
      "\n"
      "Runs command as one process (rank) per slot on the given hosts, starting remote\n"
      "ranks over SSH, and tears the whole job down when any rank fails.\n"
      "The command starts at the first word that is not an option, or after --.\n"
      "\n"
      "Subcommands:\n"
      "  run      launch the job (the default)\n"
      "  check    check SSH, host key, login and remote hvdrun on every host\n"
      "  stacks   print where each rank of a running job is: its stacks and collective\n"
      "  agent    internal: started on each host by the launcher over SSH\n";
  // Descriptions start in one column; an option wider than it gets its description on
  // the next line, as argparse does.
  constexpr size_t kColumn = 30;
  constexpr size_t kIndent = kColumn + 4;
  constexpr size_t kRoom = 80 - kIndent;
  for (const char* group : {"Job", "Elastic", "Join", "SSH", "Output", "Horovod", "Other"}) {
    if (std::strcmp(group, "Join") == 0) {
      out += "\nJoin mode (torchrun's flags: the same command on every node; see hvdrun(1)):\n";
    } else if (std::strcmp(group, "Horovod") == 0) {
      out += "\nHorovod options (horovodrun's; each sets its variable in every rank):\n";
    } else if (std::strcmp(group, "Elastic") == 0) {
      out += "\nElastic options (on with --min-np, --host-discovery-script or --reset-limit):\n";
    } else {
      out += std::string("\n") + group + " options:\n";
    }
    for (const auto& s : options()) {
      if (std::strcmp(s.group, group) != 0) continue;
      std::string col = column(s);
      if (col.size() > kColumn) {
        out += "  " + col + "\n" + std::string(kIndent, ' ');
      } else {
        out += "  " + col + std::string(kColumn - col.size() + 2, ' ');
      }
      // Wrap the description at 80 columns, continuation lines under its first word.
      std::string_view rest = s.help;
      while (!rest.empty()) {
        size_t take = rest.size();
        if (take > kRoom) {
          take = rest.rfind(' ', kRoom);
          if (take == std::string_view::npos || take == 0) take = kRoom;
        }
        out += std::string(rest.substr(0, take)) + "\n";
        rest.remove_prefix(take);
        while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
        if (!rest.empty()) out += std::string(kIndent, ' ');
      }
    }
  }
  // The statuses by their names in common/exit_status.h (hvdrun(1) has the full table).
  const auto n = [](int status) { return std::to_string(status); };
  out += "\nExit status: " + n(exit_status::kOk) +
         " when every rank succeeds; else the first failing rank's code\n(128+signal if "
         "killed); " +
         n(exit_status::for_signal(SIGINT)) + " after Ctrl-C; " +
         n(exit_status::for_signal(SIGTERM)) + " after SIGTERM; " +
         n(exit_status::for_signal(SIGPIPE)) + " when the reader\nof the output goes away; " +
         n(exit_status::kUsage) + " for bad usage; " + n(exit_status::kLaunchFailed) +
         " when preflight or launch fails.\n"
         "See hvdrun(1) for hosts, environment, SSH configuration and output details.\n";
  return out;
}

}  // namespace hvdrun::cli
