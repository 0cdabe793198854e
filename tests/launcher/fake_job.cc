// FakeAgentLink and FakeJobClock (see fake_job.h).
#include "tests/launcher/fake_job.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace hvdrun::testing {

namespace proto = launcher::proto;
using launcher::IoResult;

FakeAgentLink::FakeAgentLink(FakeAgentScript script, std::shared_ptr<FakeAgentRecord> record)
    : script_(std::move(script)),
      record_(std::move(record)),
      ready_(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC)) {}

void FakeAgentLink::add_pollfds(std::vector<pollfd>& fds, bool want_read, bool) const {
  if (want_read && (!to_launcher_.empty() || eof_)) fds.push_back({ready_.get(), POLLIN, 0});
}

IoResult FakeAgentLink::read(char* buf, std::size_t size) {
  if (!to_launcher_.empty()) {
    const std::size_t n = std::min(size, to_launcher_.size());
    std::memcpy(buf, to_launcher_.data(), n);
    to_launcher_.consume(n);
    return {IoResult::ok, n, {}};
  }
  if (!eof_) ++record_->idle_reads;
  return {eof_ ? IoResult::eof : IoResult::would_block, 0, {}};
}

IoResult FakeAgentLink::write(const char* buf, std::size_t size) {
  if (eof_) return {IoResult::error, 0, "write to agent: the fake agent is gone"};
  decoder_.feed(std::string_view(buf, size));
  while (auto m = decoder_.next()) on_frame(*m);
  return {IoResult::ok, size, {}};
}

void FakeAgentLink::abort() {
  record_->aborted = true;
  eof_ = true;
}

std::string FakeAgentLink::close(std::chrono::steady_clock::time_point) {
  eof_ = true;
  return "exited with code 0";
}

void FakeAgentLink::exit_rank(int rank, bool signaled, int value) {
  running_.erase(rank);
  proto::RankExited ex;
  ex.rank = rank;
  ex.signaled = signaled;
  ex.value = value;
  if (signaled || value != 0) {
    const auto it = script_.rank_stderr_tail.find(rank);
    ex.stderr_tail = it != script_.rank_stderr_tail.end() ? it->second : script_.stderr_tail;
  }
  proto::encode(ex, to_launcher_);
}

void FakeAgentLink::on_frame(const proto::Message& m) {
  if (std::holds_alternative<proto::Hello>(m)) {
    if (script_.answers) {
      proto::encode(proto::AgentHello{proto::kVersion, 4242, "fake-host", 29500, "lo", {}, {}},
                    to_launcher_);
    }
  } else if (const auto* s = std::get_if<proto::Spawn>(&m)) {
    record_->spawns.push_back(*s);
    if (!script_.starts) return;
    proto::encode(proto::RankStarted{s->rank, 1000 + s->rank}, to_launcher_);
    running_[s->rank] = true;
    if (script_.elastic) proto::encode(proto::RankElastic{s->rank, 0}, to_launcher_);
    if (!script_.output.empty()) {
      proto::encode(proto::Output{s->rank, proto::Stream::out, script_.output}, to_launcher_);
    }
    if (auto it = script_.exit_codes.find(s->rank);
        it != script_.exit_codes.end() && !script_.exit_after_heartbeats.count(s->rank)) {
      exit_rank(s->rank, false, it->second);
    }
  } else if (std::holds_alternative<proto::Kill>(m)) {
    ++record_->kills;
    std::vector<int> ranks;
    for (const auto& [rank, running] : running_) ranks.push_back(rank);
    for (int rank : ranks) exit_rank(rank, true, SIGTERM);
  } else if (const auto* g = std::get_if<proto::Regenerate>(&m)) {
    record_->regenerates.push_back(*g);
    std::map<int, int> placed;
    for (const auto& p : g->ranks) placed[p.old_rank] = p.rank;
    if (script_.gone_on_retire &&
        std::any_of(g->ranks.begin(), g->ranks.end(), [](const auto& p) { return p.rank < 0; })) {
      eof_ = true;
      return;
    }
    std::vector<int> ranks;
    for (const auto& [rank, running] : running_) ranks.push_back(rank);
    for (int rank : ranks) {
      const auto it = placed.find(rank);
      if (it == placed.end())
        exit_rank(rank, true, SIGTERM);
      else if (it->second < 0)
        exit_rank(rank, false, 0);
    }
  } else if (std::holds_alternative<proto::Heartbeat>(m)) {
    ++record_->heartbeats;
    if (script_.answers) proto::encode(proto::Heartbeat{}, to_launcher_);
    ++heartbeats_;
    for (const auto& [rank, after] : script_.exit_after_heartbeats) {
      if (after == heartbeats_ && running_.count(rank))
        exit_rank(rank, false, script_.exit_codes[rank]);
    }
  }
}

int FakeJobClock::wait(std::vector<pollfd>& fds, Clock::time_point until) {
  if (++waits_ == interrupt_wait_) pending_ = interrupt_sig_;
  const int ready = ::poll(fds.data(), fds.size(), 0);
  if (ready > 0) return ready;
  now_ = std::max(now_, until);
  return 0;
}

int FakeJobClock::take_interrupt() { return std::exchange(pending_, 0); }

}  // namespace hvdrun::testing
