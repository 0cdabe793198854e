// Rendering of the preflight report and the `hvdrun check` entry point.
#include "launcher/hosts/check.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "common/exit_status.h"
#include "common/quote.h"
#include "common/version.h"
#include "launcher/hosts/host_topologies.h"
#include "launcher/plan/placement_env.h"
#include "launcher/plan/start_window.h"
#include "launcher/topology/topology_report.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::launcher {
namespace {

// Characters on screen: UTF-8 continuation bytes take no column of their own.
std::size_t columns(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) == 0x80 ? 0 : 1;
  return n;
}

// `s` cut to `max` characters (the last three then "..."), never inside a UTF-8 character:
// a host name of 100,000 characters must not make a table of megabytes. `hvdrun check
// --json` keeps every value whole.
std::string cell(std::string_view s, std::size_t max) {
  if (columns(s) <= max) return std::string(s);
  std::size_t kept = 0;
  std::size_t i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) continue;
    if (kept == max - 3) break;
    ++kept;
  }
  return std::string(s.substr(0, i)) + "...";
}

// Widest cells in the table, in characters.
constexpr std::size_t kMaxNameColumns = 48;
constexpr std::size_t kMaxDetailColumns = 300;

std::string pad(const std::string& s, std::size_t width) {
  const std::size_t n = columns(s);
  return n >= width ? s : s + std::string(width - n, ' ');
}

std::string latency_text(const HostCheck& h) {
  if (h.local || h.verdict != Verdict::ok) return "-";
  return std::to_string(h.latency.count()) + " ms";
}

}  // namespace

std::string render_table(const PreflightReport& report, bool notes) {
  const std::vector<std::string> head = {"HOST", "ADDRESS", "VERDICT", "LATENCY", "DETAIL"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& h : report.hosts) {
    rows.push_back({cell(h.host, kMaxNameColumns), cell(h.address, kMaxNameColumns),
                    std::string(to_string(h.verdict)), latency_text(h),
                    cell(h.detail, kMaxDetailColumns)});
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], columns(r[c]));
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (std::size_t c = 0; c + 1 < r.size(); ++c) out += pad(r[c], width[c] + 2);
    return out + r.back() + "\n";
  };
  std::string out = line(head);
  const std::size_t indent = width[0] + width[1] + width[2] + width[3] + 8;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const HostCheck& h = report.hosts[i];
    out += line(rows[i]);
    if (!h.fix.empty())
      out += std::string(indent, ' ') + "fix: " + cell(h.fix, kMaxDetailColumns) + "\n";
    if (notes && h.verdict == Verdict::ok && h.shell > kSlowRemoteShell)
      out += std::string(indent, ' ') + "note: logged in after " + std::to_string(h.login.count()) +
             " ms; then the remote shell took " + std::to_string(h.shell.count()) +
             " ms to start hvdrun (its start-up files, e.g. ~/.bashrc, or a busy host): every "
             "launch pays that on this host\n";
  }
  int bad = report.failures();
  int remote = 0;
  for (const auto& h : report.hosts) remote += h.local ? 0 : 1;
  std::ostringstream summary;
  summary << report.hosts.size() << (report.hosts.size() == 1 ? " host" : " hosts") << " ("
          << remote << " over SSH) checked in " << report.elapsed.count() << " ms: ";
  if (bad == 0) {
    summary << "all ok";
  } else {
    summary << bad << " failed";
  }
  return out + summary.str() + "\n";
}

std::string render_json(const PreflightReport& report) {
  std::ostringstream out;
  out << "{\"ok\": " << (report.ok() ? "true" : "false")
      << ", \"elapsed_ms\": " << report.elapsed.count() << ", \"hosts\": [";
  bool first = true;
  for (const auto& h : report.hosts) {
    out << (first ? "" : ", ") << "{\"host\": " << json_quote(h.host)
        << ", \"local\": " << (h.local ? "true" : "false")
        << ", \"address\": " << json_quote(h.address)
        << ", \"verdict\": " << json_quote(to_string(h.verdict))
        << ", \"latency_ms\": " << h.latency.count() << ", \"login_ms\": " << h.login.count()
        << ", \"shell_ms\": " << h.shell.count() << ", \"detail\": " << json_quote(h.detail)
        << ", \"fix\": " << json_quote(h.fix) << "}";
    first = false;
  }
  out << "]}\n";
  return out.str();
}

int run_check(const LaunchOptions& options) { return run_check(options, kVersionLine); }

std::string render_probed(const LaunchPlan& plan, const ProbedHosts& probed, bool json) {
  std::string out =
      json ? "{\"ok\": " + std::string(probed.report.ok() ? "true" : "false") + ", \"hosts\": ["
           : "";
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    const std::string& name = plan.hosts[i].name;
    const ProbedHost& p = probed.hosts[i];
    if (json) {
      out += std::string(i ? ", " : "") + "{\"host\": " + json_quote(name) + ", \"topology\": " +
             (p.topology ? render_topology_json(*p.topology) : std::string("null")) +
             ", \"gpu_ids\": [";
      for (std::size_t g = 0; g < p.gpu_ids.size(); ++g)
        out += (g ? ", " : "") + json_quote(p.gpu_ids[g]);
      out += "], \"gpus_from\": " + json_quote(p.gpus_from) +
             ", \"error\": " + (p.topology ? std::string("null") : json_quote(p.why_not)) + "}";
      continue;
    }
    out += (i ? "\n" : "") + std::string("== ") + name + " ==\n";
    if (!p.topology) {
      out += "not read: " + p.why_not + "\n";
      const std::string& fix = probed.report.hosts[i].fix;
      if (!fix.empty()) out += "fix: " + fix + "\n";
      continue;
    }
    out += render_topology_table(*p.topology);
    if (!p.gpu_ids.empty())
      out +=
          "GPUs its ranks are given: " + comma_joined(p.gpu_ids) + " (from " + p.gpus_from + ")\n";
  }
  return json ? out + "]}\n" : out;
}

// `hvdrun check --topology`: this machine alone without hosts, else every host given.
int run_topology_check(const LaunchOptions& options) {
  if (options.hosts.empty()) {
    const HostTopology topology = load_host_topology();
    std::cout << (options.json ? render_topology_json(topology) : render_topology_table(topology))
              << std::flush;
    return exit_status::kOk;
  }
  const LaunchPlan plan = make_check_plan(options);
  ssh::Libssh2Connector connector;
  const ProbedHosts probed = probe_hosts(plan, options, connector);
  std::cout << render_probed(plan, probed, options.json) << std::flush;
  const bool all = std::all_of(probed.hosts.begin(), probed.hosts.end(),
                               [](const ProbedHost& p) { return p.topology.has_value(); });
  return all ? exit_status::kOk : exit_status::kLaunchFailed;
}

int run_check(const LaunchOptions& options, const std::string& expected_version) {
  if (options.topology) return run_topology_check(options);
  ssh::Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = expected_version;
  settings.max_parallel = static_cast<int>(launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  PreflightReport report = preflight(options, connector, settings);
  std::cout << (options.json ? render_json(report) : render_table(report, options.verbose))
            << std::flush;
  return report.ok() ? exit_status::kOk : exit_status::kLaunchFailed;
}

}  // namespace hvdrun::launcher
