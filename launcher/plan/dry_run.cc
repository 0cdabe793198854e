// Rendering of a launch plan for --dry-run, as text and as JSON.
#include "launcher/plan/dry_run.h"

#include <cstddef>
#include <string>
#include <vector>

#include "common/quote.h"
#include "launcher/plan/launch_method.h"

namespace hvdrun::launcher {
namespace {

std::string source_text(const LaunchPlan& plan) {
  // Join mode names its nodes node0, node1, ... after their node ranks.
  if (plan.launcher.kind == LauncherChoice::join) return "--nnodes and --nproc-per-node";
  switch (plan.source) {
    case HostSource::command_line:
      return "-H/--hostfile";
    case HostSource::scheduler:
      return plan.allocation.scheduler + " (" + plan.allocation.origin + ")";
    case HostSource::localhost:
      return "localhost (no -H, --hostfile or allocation)";
  }
  return "?";
}

const std::string& host_of(const LaunchPlan& plan, const hostfile::RankSlot& r) {
  return plan.hosts[static_cast<std::size_t>(r.host_index)].name;
}

std::string json_strings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_quote(v[i]);
  return out + "]";
}

// A rank's GPUs when its host lists them: its slice under --gpus-per-rank, else the whole
// list; null when its agent chooses them from the host's own.
std::string rank_gpus(const LaunchPlan& plan, const hostfile::RankSlot& r) {
  const auto& gpus = plan.hosts[static_cast<std::size_t>(r.host_index)].gpus;
  if (gpus.empty()) return "null";
  if (plan.gpus_per_rank == 0) return json_strings(gpus);
  const auto g = static_cast<std::size_t>(plan.gpus_per_rank);
  const auto first = static_cast<std::size_t>(r.local_rank) * g;
  if (first + g > gpus.size()) return "null";
  return json_strings({gpus.begin() + static_cast<std::ptrdiff_t>(first),
                       gpus.begin() + static_cast<std::ptrdiff_t>(first + g)});
}

std::string json_numbers(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// A rank's binding as JSON, from its host's bindings; null where the host has none.
std::string rank_binding(const PlannedBindings& host, const hostfile::RankSlot& r) {
  if (!host.bindings) return "null";
  const auto local = static_cast<std::size_t>(r.local_rank);
  if (local >= host.bindings->ranks.size()) return "null";
  const RankPlacement& p = host.bindings->ranks[local];
  std::vector<std::string> gpus;
  for (int g : p.gpus) {
    const auto& ids = host.bindings->gpu_ids;
    gpus.push_back(ids.empty() ? std::to_string(g) : ids.at(static_cast<std::size_t>(g)));
  }
  return "{\"cores\": " + json_numbers(p.cores) + ", \"cpus\": " + json_numbers(p.cpus) +
         ", \"numa\": " + json_numbers(p.numa) + ", \"gpus\": " + json_strings(gpus) +
         ", \"nic\": " + (p.nic.empty() ? std::string("null") : json_quote(p.nic)) + "}";
}

}  // namespace

std::string render_dry_run(const LaunchPlan& plan, const std::vector<PlannedBindings>& bindings) {
  std::string out = "launcher: " + to_string(plan.launcher) + "; hosts from " + source_text(plan);
  std::string local;
  for (const auto& h : plan.hosts) {
    if (h.method == LaunchMethod::local) local += (local.empty() ? "" : ", ") + h.name;
  }
  if (!local.empty() && plan.hosts.size() > 1) out += "; run here without SSH: " + local;
  out += "\n";
  for (const auto& r : plan.placement.ranks) {
    out +=
        std::to_string(r.rank) + " " + host_of(plan, r) + " " + std::to_string(r.local_rank) + "\n";
  }
  for (std::size_t i = 0; i < bindings.size() && i < plan.hosts.size(); ++i) {
    const auto& b = bindings[i].bindings;
    out += b ? render_bindings(plan.hosts[i].name, b->ranks, b->gpu_ids)
             : "host " + plan.hosts[i].name +
                   ": not placed before the start: " + bindings[i].why_not + "\n";
  }
  return out;
}

std::string render_dry_run_json(const LaunchPlan& plan,
                                const std::vector<PlannedBindings>& bindings) {
  const bool placed = !bindings.empty();
  std::string out = "{\"launcher\": " + json_quote(to_string(plan.launcher)) +
                    ", \"source\": " + json_quote(source_text(plan)) + ", \"hosts\": [";
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    const auto& h = plan.hosts[i];
    out += std::string(i ? ", " : "") + "{\"host\": " + json_quote(h.name) +
           ", \"slots\": " + std::to_string(h.slots) +
           ", \"method\": " + json_quote(to_string(h.method)) +
           ", \"gpus\": " + (h.gpus.empty() ? std::string("null") : json_strings(h.gpus));
    if (placed) {
      const auto& b = bindings.at(i);
      out += ", \"not_placed\": " + (b.bindings ? std::string("null") : json_quote(b.why_not));
    }
    out += "}";
  }
  out += "], \"ranks\": [";
  for (const auto& r : plan.placement.ranks) {
    out += std::string(r.rank ? ", " : "") + "{\"rank\": " + std::to_string(r.rank) +
           ", \"host\": " + json_quote(host_of(plan, r)) +
           ", \"local_rank\": " + std::to_string(r.local_rank) +
           ", \"gpus\": " + rank_gpus(plan, r);
    if (placed)
      out +=
          ", \"binding\": " + rank_binding(bindings.at(static_cast<std::size_t>(r.host_index)), r);
    out += "}";
  }
  return out + "]}\n";
}

}  // namespace hvdrun::launcher
