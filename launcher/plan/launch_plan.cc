// make_plan: host source, placement and launch method, each decided here and nowhere else.
#include "launcher/plan/launch_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/error.h"
#include "common/quote.h"
#include "hostfile/resource_filter.h"
#include "launcher/plan/local_host.h"

namespace hvdrun::launcher {
namespace {

PlannedHost plan_host(const std::string& name, int slots, const LauncherChoice& launcher) {
  PlannedHost h;
  h.name = name;
  h.slots = slots;
  switch (launcher.kind) {
    case LauncherChoice::slurm:
      // srun reaches every node of the step, the one this runs on included.
      h.local = false;
      h.method = LaunchMethod::slurm;
      break;
    case LauncherChoice::exec:
      h.local = false;
      h.method = LaunchMethod::exec;
      break;
    case LauncherChoice::join:
      // Node 0 (the first host) is this one; every other node's hvdrun connects to it.
      h.local = false;
      h.method = LaunchMethod::join;
      break;
    default:
      h.local = is_local_host(name);
      h.method = h.local ? LaunchMethod::local : LaunchMethod::ssh;
      break;
  }
  return h;
}

// The id of the srun step this process runs in, or nothing: in a batch script or salloc's
// shell there is none, and the batch, extern and interactive steps' ids are Slurm's special
// values near 2^32 (a shell there is where hvdrun belongs).
std::optional<unsigned long> srun_step(const hostfile::GetEnv& getenv) {
  const char* id = getenv("SLURM_STEP_ID");
  if (id == nullptr || *id == '\0' || std::strspn(id, "0123456789") != std::strlen(id) ||
      std::strlen(id) > 10) {
    return std::nullopt;
  }
  const unsigned long step = std::stoul(id);
  if (step >= 0xfffffff0UL) return std::nullopt;
  return step;
}

// Inside an srun step the Slurm variables describe the step, not the allocation: a
// one-task step's SLURM_TASKS_PER_NODE ('1') disagrees with the job's node list, and a
// step of hvdrun's own would wait for the resources this one holds. Say that, instead of
// what the mismatch looks like.
void refuse_allocation_inside_step(const PlanEnvironment& env) {
  const auto step = srun_step(env.getenv);
  const char* nodes = env.getenv("SLURM_JOB_NODELIST");
  if (!step || nodes == nullptr) return;
  const char* tasks = env.getenv("SLURM_TASKS_PER_NODE");
  throw UsageError(
      "hvdrun runs inside srun's job step " + std::to_string(*step) +
      ", so the Slurm variables describe that step" +
      (tasks ? " (SLURM_TASKS_PER_NODE=" + quote(tasks) + ")" : std::string()) +
      ", not the allocation of SLURM_JOB_NODELIST=" + quote(nodes) +
      "; run hvdrun in the batch script or the salloc shell itself, without srun (it starts its "
      "own step), or name the hosts with -H/--hostfile");
}

// The host source in priority order: -H/--hostfile, a scheduler's allocation, localhost
// with `default_slots`.
std::vector<hostfile::HostSlots> source_hosts(const LaunchOptions& options, LaunchPlan& plan,
                                              const PlanEnvironment& env, int default_slots) {
  if (!options.hosts.empty()) {
    plan.source = HostSource::command_line;
    return options.hosts;
  }
  refuse_allocation_inside_step(env);
  if (auto allocation = hostfile::detect_allocation(env.getenv)) {
    plan.source = HostSource::scheduler;
    plan.allocation = std::move(*allocation);
    return plan.allocation.hosts;
  }
  plan.source = HostSource::localhost;
  return {{"localhost", default_slots}};
}

// Whether `word` is hvdrun's -np, as written before a command (`-np 2`, `-np=2`,
// `--num-proc 2`).
bool is_np_option(std::string_view word) {
  for (std::string_view form : {"-np", "--num-proc"}) {
    if (word == form || (word.substr(0, form.size()) == form && word.size() > form.size() &&
                         word[form.size()] == '=')) {
      return true;
    }
  }
  return false;
}

// -np missing with nothing else to size the job. `hvdrun python train.py -np 2` lands here
// too: everything after the command's first word is the command's, so say so.
UsageError np_required(const std::vector<std::string>& command) {
  std::string program = command.empty() ? "python" : command.front();
  if (program.size() > 60 || program.find_first_of(" \t\r\n") != std::string::npos) {
    program = "command";
  }
  if (std::any_of(command.begin() + (command.empty() ? 0 : 1), command.end(), is_np_option)) {
    return UsageError(
        "-np is required without -H, --hostfile or a scheduler allocation: -np and other "
        "options after the command go to the program; put them before " +
        quote(program) + ", as in hvdrun -np 4 " + program + " ...");
  }
  return UsageError(
      "-np is required without -H, --hostfile or a scheduler allocation; expected e.g. "
      "hvdrun -np 4 " +
      program);
}

bool in_slurm_allocation(const LaunchPlan& plan) {
  return plan.source == HostSource::scheduler && plan.allocation.scheduler == "slurm";
}

// --launcher auto resolved; slurm checked against where the hosts came from.
LauncherChoice resolve_launcher(const LaunchOptions& options, const LaunchPlan& plan,
                                const PlanEnvironment& env) {
  LauncherChoice c = options.launcher;
  if (c.kind == LauncherChoice::automatic) {
    c.kind = in_slurm_allocation(plan) && env.on_path("srun") ? LauncherChoice::slurm
                                                              : LauncherChoice::ssh;
  }
  if (c.kind == LauncherChoice::slurm && env.getenv("SLURM_JOB_ID") == nullptr) {
    throw UsageError(
        "--launcher slurm needs a Slurm allocation (SLURM_JOB_ID is not set); run hvdrun "
        "inside salloc or sbatch, or choose --launcher ssh");
  }
  return c;
}

}  // namespace

std::string_view to_string(LaunchMethod method) {
  switch (method) {
    case LaunchMethod::local:
      return "local";
    case LaunchMethod::ssh:
      return "ssh";
    case LaunchMethod::slurm:
      return "slurm";
    case LaunchMethod::exec:
      return "exec";
    case LaunchMethod::join:
      return "join";
  }
  return "?";
}

bool LaunchPlan::all_local() const {
  return std::all_of(hosts.begin(), hosts.end(), [](const PlannedHost& h) { return h.local; });
}

PlanEnvironment PlanEnvironment::process() {
  PlanEnvironment env;
  env.getenv = [](const char* name) -> const char* { return std::getenv(name); };
  env.on_path = [](const std::string& program) {
    return find_in_path(program, std::getenv("PATH"));
  };
  return env;
}

std::optional<SrunTaskRefusal> srun_task_refusal(const hostfile::GetEnv& getenv) {
  const auto step = srun_step(getenv);
  if (!step) return std::nullopt;
  const char* count = getenv("SLURM_STEP_NUM_TASKS");
  if (count == nullptr) count = getenv("SLURM_NTASKS");
  if (count == nullptr || std::strspn(count, "0123456789") != std::strlen(count) ||
      std::strlen(count) == 0 || std::strlen(count) > 9 || std::stol(count) <= 1) {
    return std::nullopt;
  }
  SrunTaskRefusal r;
  const char* procid = getenv("SLURM_PROCID");
  r.print = procid == nullptr || std::string_view(procid) == "0";
  r.message = "hvdrun was started by srun once per task (" + std::string(count) +
              " tasks in job step " + std::to_string(*step) +
              "), and each copy would launch the whole job; run it once, in the batch script "
              "without srun (hvdrun starts its own step), or use --launcher ssh";
  return r;
}

bool find_in_path(const std::string& program, const char* path) {
  if (path == nullptr) return false;
  std::string_view rest(path);
  while (true) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string file = dir + "/" + program;
    if (::access(file.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

LaunchPlan make_plan(const LaunchOptions& options, const PlanEnvironment& env) {
  LaunchPlan plan;
  auto hosts = hostfile::filter_hosts(source_hosts(options, plan, env, options.np.value_or(1)),
                                      options.include, options.exclude);
  if (plan.source == HostSource::localhost && !options.np) throw np_required(options.command);
  plan.launcher = resolve_launcher(options, plan, env);
  plan.placement = hostfile::place(hosts, options.np);
  plan.gpus_per_rank = options.placement.gpus_per_rank;
  for (const auto& h : plan.placement.hosts) {
    plan.hosts.push_back(plan_host(h.name, h.slots, plan.launcher));
    plan.hosts.back().gpus = h.gpus;
  }
  if (plan.launcher.kind == LauncherChoice::join && !plan.hosts.empty()) {
    plan.hosts.front().local = true;
    plan.hosts.front().method = LaunchMethod::local;
  }
  for (const auto& slot : plan.placement.ranks) {
    plan.hosts[static_cast<std::size_t>(slot.host_index)].ranks.push_back(slot.rank);
  }
  return plan;
}

LaunchPlan make_check_plan(const LaunchOptions& options, const PlanEnvironment& env) {
  LaunchPlan plan;
  auto hosts = hostfile::filter_hosts(source_hosts(options, plan, env, options.np.value_or(1)),
                                      options.include, options.exclude);
  plan.launcher = resolve_launcher(options, plan, env);
  for (const auto& h : hosts) plan.hosts.push_back(plan_host(h.name, h.slots, plan.launcher));
  return plan;
}

}  // namespace hvdrun::launcher
