// The stack report on the launcher's side (docs/diagnosis.md#the-stack-report): every agent
// is asked for its ranks' stacks (a stacks-request frame), each answers within kStacksWait
// with what its ranks wrote, and the report, grouped (stack_report.h), is printed on hvdrun's
// stderr: before the --timeout teardown, and on SIGQUIT or `hvdrun stacks` (which gets it
// too), after which the job goes on.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/seconds_text.h"
#include "common/stack_file.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/job/job_state.h"
#include "launcher/job/stack_report.h"

namespace hvdrun::launcher::job_detail {

// True once the report before the --timeout teardown is printed (or cannot be); until then
// the teardown waits for it.
bool Job::report_stacks_before_teardown() {
  if (timeout_stacks_done_) return true;
  if (!stacks_) {
    request_stacks("--timeout " + std::to_string(*opt_.timeout_s) + " s", true);
  } else if (!stacks_->for_timeout) {
    stacks_->for_timeout = true;  // a SIGQUIT's report, just begun, serves
  }
  return timeout_stacks_done_;
}

void Job::request_stacks(const std::string& why, bool for_timeout) {
  StacksGather g;
  g.id = ++stacks_requests_;
  g.why = why;
  g.for_timeout = for_timeout;
  // The agents' wait, and time for their answers to travel.
  g.until = now() + kStacksWait + milliseconds(500);
  for (Host& h : hosts_) {
    if (h.closed || !h.hello) continue;
    send(h, proto::StacksRequest{g.id, static_cast<std::uint32_t>(kStacksWait.count())});
    g.hosts.push_back(h.index);
  }
  spdlog::info("gathering the ranks' stacks ({}) from {} host(s)", why, g.hosts.size());
  stacks_ = std::move(g);
  check_stacks(now());
}

void Job::on_stacks(Host& h, const proto::Stacks& s) {
  if (!stacks_ || s.id != stacks_->id) return;  // a late answer to an earlier request
  for (const proto::RankStacks& rs : s.ranks) {
    owner_of(h, rs.rank, "stacks");
    const int rank = ranks_[static_cast<std::size_t>(rs.rank)].rank;
    if (rank < 0) continue;  // not in the current generation
    RankStackAnswer a;
    a.rank = rank;
    a.host = h.name;
    a.kind = rs.status == proto::StackStatus::whole     ? RankStackAnswer::Kind::whole
             : rs.status == proto::StackStatus::partial ? RankStackAnswer::Kind::partial
                                                        : RankStackAnswer::Kind::no_handler;
    a.text = rs.text;
    stacks_->got.push_back(std::move(a));
  }
  std::erase(stacks_->hosts, h.index);
}

// Prints the report once every asked host answered (or closed), or its time is up.
void Job::check_stacks(Clock::time_point t) {
  if (!stacks_) return;
  StacksGather& g = *stacks_;
  std::erase_if(g.hosts, [&](int i) { return hosts_[static_cast<std::size_t>(i)].closed; });
  if (!g.hosts.empty() && t < g.until) return;
  std::vector<bool> answered(static_cast<std::size_t>(workers()), false);
  for (const RankStackAnswer& a : g.got) answered[static_cast<std::size_t>(a.rank)] = true;
  for (int w = 0; w < workers(); ++w) {
    const RankState& rs = ranks_[static_cast<std::size_t>(w)];
    if (rs.done || !rs.started || rs.rank < 0 || answered[static_cast<std::size_t>(rs.rank)])
      continue;
    RankStackAnswer a;
    a.rank = rs.rank;
    a.host = hosts_[static_cast<std::size_t>(rs.host)].name;
    a.kind = RankStackAnswer::Kind::no_answer;
    g.got.push_back(std::move(a));
  }
  const std::string wait_text = seconds_text(kStacksWait) + " s";
  const std::string report = format_stack_report(std::move(g.got), g.why, wait_text);
  relay_->flush();
  write_all(ctx_.stderr_fd, report.data(), report.size());
  for (UniqueFd& c : stacks_clients_) (void)write_all(c.get(), report.data(), report.size());
  stacks_clients_.clear();
  if (g.for_timeout) timeout_stacks_done_ = true;
  stacks_.reset();
  if (stall_failure_) job_failure(*stall_failure_);  // the stall's failure, now reported
}

// A rank that ended itself past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: before its failure
// stops the job, where the others are (the rank that never came is the one to see). The
// ranks that wait with it end alike meanwhile: the same stall, no failure of their own.
bool Job::stall_ended(const Host& h, const proto::RankExited& ex,
                      const std::vector<std::string>& tail) {
  const bool stall = std::any_of(tail.begin(), tail.end(), [](const std::string& line) {
    return line.find(stack_file::kStallShutdown) != std::string::npos;
  });
  if (!stall || in_process_) return false;
  if (stall_failure_) return true;
  if (stacks_ || running_ranks() == 0) return false;
  held_.reset();
  stall_failure_ = rank_failure(h, ex, running_ranks());
  request_stacks("rank " + std::to_string(ranks_[static_cast<std::size_t>(ex.rank)].rank) +
                     " ended a stall past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
                 false);
  return true;
}

// `hvdrun stacks` (stacks_socket.h): where it connects while the job runs. A job that cannot
// listen runs without it.
void Job::open_stacks_socket() {
  try {
    stacks_socket_.emplace();
  } catch (const std::exception& e) {
    spdlog::debug("no socket for hvdrun stacks: {}", e.what());
  }
}

// Each connection asks for a report (one gathering serves all that came meanwhile).
void Job::accept_stacks_clients() {
  if (!stacks_socket_) return;
  bool fresh = false;
  while (UniqueFd c = stacks_socket_->accept_client()) {
    if (stopping()) {
      static constexpr char kStopping[] = "hvdrun: the job is stopping; no report\n";
      (void)write_all(c.get(), kStopping, sizeof kStopping - 1);
      continue;
    }
    stacks_clients_.push_back(std::move(c));
    fresh = true;
  }
  if (fresh && !stacks_) request_stacks("hvdrun stacks; the job goes on", false);
}

}  // namespace hvdrun::launcher::job_detail
