// What the job tells besides its output (job_state.h): which ranks the console shows
// (--ranks-filter, --local-ranks-filter) and the --result-file written when it ends, with
// the verdict and every rank's end (docs/result-file.schema.json describes the file).
#include <csignal>
#include <ctime>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/exit_status.h"
#include "common/quote.h"
#include "launcher/job/job_state.h"

namespace hvdrun::launcher::job_detail {

std::vector<int> console_ranks(const LaunchOptions& o, const hostfile::Placement& placement) {
  if (o.console_local_ranks.empty()) return o.console_ranks;
  const auto& global = o.console_ranks;
  const auto& local = o.console_local_ranks;
  std::vector<int> out;
  for (const auto& slot : placement.ranks) {
    if ((global.empty() || std::binary_search(global.begin(), global.end(), slot.rank)) &&
        std::binary_search(local.begin(), local.end(), slot.local_rank))
      out.push_back(slot.rank);
  }
  return out;
}

namespace {

// ISO 8601 in UTC with milliseconds ("2026-11-29T08:15:02.125Z"), or null when unknown.
std::string json_time(std::chrono::system_clock::time_point t) {
  if (t.time_since_epoch().count() == 0) return "null";
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char text[96];
  std::snprintf(text, sizeof text, "\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\"", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count() % 1000));
  return text;
}

std::string json_int_or_null(bool known, int value) {
  return known ? std::to_string(value) : std::string("null");
}

// The verdict's cause, from the failure that decided the job.
const char* verdict_cause(const std::optional<Failure>& f) {
  if (!f) return "ok";
  if (f->timed_out) return "timeout";
  if (f->interrupted) return "interrupted";
  if (f->requested) return "stopped";
  if (f->rank_failed) return "rank-failed";
  return "launch-failed";
}

// The verdict's cause for a launch that ended before any job ran.
const char* unstarted_cause(int exit_code) {
  if (exit_code == exit_status::kUsage) return "usage";
  if (exit_code == exit_status::for_signal(SIGINT) ||
      exit_code == exit_status::for_signal(SIGTERM) || exit_code == exit_status::for_signal(SIGHUP))
    return "interrupted";
  return "launch-failed";
}

// Written whole to PATH.tmp, then renamed: a reader never sees half a file. A file that
// cannot be written is said on stderr; the exit code stays the job's.
void write_whole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  bool ok = false;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    ok = f && f.write(text.data(), static_cast<std::streamsize>(text.size())) && f.flush();
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return;
  const int err = errno;
  std::remove(tmp.c_str());
  spdlog::error("cannot write --result-file {}: {}", path, std::strerror(err));
}

// The fields every result file starts with.
std::string verdict_json(int exit_code, const char* cause, const std::string* message,
                         std::chrono::system_clock::time_point started) {
  std::string j = "{\n  \"version\": 1,\n";
  j += "  \"exit_code\": " + std::to_string(exit_code);
  j += ",\n  \"cause\": " + json_quote(cause);
  j += ",\n  \"message\": " + (message != nullptr ? json_quote(*message) : std::string("null"));
  j += ",\n  \"start_time\": " + json_time(started);
  j += ",\n  \"end_time\": " + json_time(std::chrono::system_clock::now());
  return j;
}

}  // namespace

void Job::write_result_file() {
  if (opt_.result_file.empty()) return;
  std::string j =
      verdict_json(outcome_ ? outcome_->exit_code : exit_status::kOk, verdict_cause(outcome_),
                   outcome_ ? &outcome_->message : nullptr, started_wall_);
  j += ",\n  \"size\": " + std::to_string(placement_.size()) + ",\n  \"ranks\": [";
  for (std::size_t p = 0; p < ranks_.size(); ++p) {
    const RankState& rs = ranks_[p];
    const int rank = rs.rank >= 0 ? rs.rank : static_cast<int>(p);
    const bool placed = rs.rank >= 0 && rs.rank < placement_.size();
    const char* cause = rs.cause != nullptr ? rs.cause : rs.started ? "lost" : "not-started";
    j += p ? ",\n    {" : "\n    {";
    j += "\"rank\": " + std::to_string(rank);
    j += ", \"host\": " + json_quote(hosts_[static_cast<std::size_t>(rs.host)].name);
    j += ", \"local_rank\": " +
         json_int_or_null(
             placed, placed ? placement_.ranks[static_cast<std::size_t>(rs.rank)].local_rank : 0);
    j += ", \"exit_code\": " + json_int_or_null(rs.exited && !rs.signaled, rs.value);
    j += ", \"signal\": " + json_int_or_null(rs.exited && rs.signaled, rs.value);
    j += ", \"cause\": " + json_quote(cause);
    j += ", \"traceback\": " + (rs.traceback.empty() ? "null" : json_quote(rs.traceback));
    j += ", \"start_time\": " +
         json_time(rs.started ? rs.started_wall : decltype(rs.started_wall){});
    j += ", \"end_time\": " + json_time(rs.ended_wall) + "}";
  }
  j += "\n  ]\n}\n";
  write_whole(opt_.result_file, j);
}

// Join mode: every joined node's hvdrun exits with the job's code and prints its report,
// so an orchestrator sees the job's verdict on every node, not only on node 0.
void Job::tell_joined_nodes() {
  const int code = outcome_ ? outcome_->exit_code : exit_status::kOk;
  bool told = false;
  for (Host& h : hosts_) {
    if (h.method != LaunchMethod::join || h.closed || !h.link) continue;
    proto::JobEnd end{code, outcome_ ? outcome_->message : std::string(), false};
    if (outcome_) {
      const auto& blamed = outcome_->hosts;
      end.this_host = std::find(blamed.begin(), blamed.end(), h.name) != blamed.end();
    }
    send(h, end);
    told = true;
  }
  if (told) flush_links(now() + std::chrono::seconds(1));
}

}  // namespace hvdrun::launcher::job_detail

namespace hvdrun::launcher {

void write_unstarted_result_file(const LaunchOptions& options, int exit_code,
                                 const std::string& message,
                                 std::chrono::system_clock::time_point started) {
  if (options.result_file.empty()) return;
  std::string j = job_detail::verdict_json(exit_code, job_detail::unstarted_cause(exit_code),
                                           &message, started);
  j += ",\n  \"size\": 0,\n  \"ranks\": []\n}\n";
  job_detail::write_whole(options.result_file, j);
}

}  // namespace hvdrun::launcher
