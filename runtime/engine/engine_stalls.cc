// The engine's stall inspector (engine.h, StallPolicy): a thread that watches how long
// this rank has waited for a collective and says which ranks it waits for, as Horovod's
// stall inspector does, and ends the job past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; and what
// this rank waits in for the stack report (wait_report).
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "common/seconds_text.h"
#include "common/stack_file.h"
#include "common/thread_failure.h"
#include "runtime/engine/engine.h"

namespace hvdrun::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Whole seconds in stall reports ("61 s"); below ten seconds a tenth ("0.3 s").
std::string stall_seconds(milliseconds d) {
  if (d >= std::chrono::seconds(10)) return std::to_string(d.count() / 1000) + " s";
  return seconds_text(milliseconds(d.count() / 100 * 100)) + " s";
}

}  // namespace

std::string Engine::stall_text(milliseconds waited, bool in_round, const std::vector<int>& absent) {
  // The oldest collective: one in an unqueued round is not queued (run_unqueued()).
  const Request& oldest = expressing_ ? express_head_ : queue_.front()->req;
  const std::size_t more = queue_.size() - (expressing_ ? 0 : 1);
  std::string s = "hvdrun: stall: this rank has waited " + stall_seconds(waited) + " for " +
                  label(oldest) + " " + tensor_text(oldest);
  if (more > 0) s += " and " + std::to_string(more) + " more";
  std::vector<int> missing = absent;
  std::string elsewhere;
  if (!in_round && static_cast<int>(last_book_.announced.size()) == size_) {
    // The ledger after the last round says what every rank had submitted.
    for (int r = 0; r < size_; ++r) {
      const auto& announced = last_book_.announced[static_cast<std::size_t>(r)];
      bool has = false;
      const bool joined = last_book_.joined_round[static_cast<std::size_t>(r)] >= 0;
      std::string theirs;
      for (std::size_t i = 0; i < announced.size(); ++i) {
        has = has || same_key(announced[i], oldest);
        if (i < 3) theirs += (i ? ", " : "") + label(announced[i]);
      }
      if (announced.size() > 3) theirs += " and " + std::to_string(announced.size() - 3) + " more";
      if (has || joined) continue;
      missing.push_back(r);
      elsewhere += "; rank " + std::to_string(r) + " has submitted " +
                   (theirs.empty() ? std::string("nothing") : theirs);
    }
  }
  if (!missing.empty()) {
    s += in_round ? "; ranks that have submitted nothing: " : "; missing on ";
    for (std::size_t i = 0; i < missing.size() && i < 32; ++i)
      s += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.size() > 32) s += " and " + std::to_string(missing.size() - 32) + " more";
  }
  s += elsewhere;
  s += ". Every rank must submit the same collectives (matched by name, or by order when "
       "unnamed)";
  return s;
}

std::string Engine::wait_report(milliseconds patience) {
  std::unique_lock lock(mu_, std::defer_lock);
  const auto give_up = Clock::now() + patience;
  while (!lock.try_lock()) {
    // The lock is held only briefly outside an exchange; a report never waits long for it.
    if (Clock::now() >= give_up)
      return "the engine is busy (its lock was not free within " + stall_seconds(patience) + ")";
    std::this_thread::sleep_for(milliseconds(5));
  }
  if (!waits()) return {};
  const Request& oldest = expressing_ ? express_head_ : queue_.front()->req;
  const std::size_t more = queue_.size() - (expressing_ ? 0 : 1);
  std::string s = label(oldest) + " " + tensor_text(oldest);
  if (more > 0) s += " and " + std::to_string(more) + " more";
  // The stall inspector's clock: when the queue last moved (none when it is disabled).
  if (!stall_.disabled)
    s += " waiting " +
         stall_seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - progress_since_));
  return s;
}

void Engine::watch_stalls() {
  if (stall_.disabled) return;
  std::unique_lock lock(mu_);
  const milliseconds tick = std::clamp(stall_.check / 10, milliseconds(10), milliseconds(1000));
  long long published = -1;
  // Progress is a counter the hot path bumps; the time it last moved is this thread's
  // observation (to a tick), so collectives read no clock.
  std::uint64_t seen_progress = progress_;
  long long seen_round = exchanging_round_;
  progress_since_ = Clock::now();
  auto round_since = progress_since_;
  while (!stopping_) {
    stall_cv_.wait_for(lock, tick, [&] { return stopping_; });
    const auto now = Clock::now();
    if (progress_ != seen_progress) {
      seen_progress = progress_;
      progress_since_ = now;
    }
    if (exchanging_round_ != seen_round) {
      seen_round = exchanging_round_;
      round_since = now;
    }
    if (stopping_ || !waits()) continue;
    auto waited = std::chrono::duration_cast<milliseconds>(now - progress_since_);
    // Blocked inside one round (some rank has not entered it), as opposed to rounds
    // that keep completing without agreement, where the last table says it all.
    const long long round =
        exchanging_round_ >= 0 && now - round_since >= stall_.check / 2 ? exchanging_round_ : -1;
    // Inside a round this rank cannot see who has not entered it: it says where it is
    // through the rendezvous halfway to the report, and reads where the others are then.
    if (round >= 0 && round != published && hooks_.arrived) {
      published = round;
      lock.unlock();
      hooks_.arrived(round);
      lock.lock();
    }
    const bool ends = stall_.shutdown.count() > 0 && waited >= stall_.shutdown;
    if (waited < stall_.check || (stall_reported_ && !ends)) continue;
    std::vector<int> absent;
    if (round >= 0 && hooks_.missing_from_round) {
      lock.unlock();
      absent = hooks_.missing_from_round(round);
      lock.lock();
    }
    if (!waits()) continue;
    stall_reported_ = true;
    waited = std::chrono::duration_cast<milliseconds>(Clock::now() - progress_since_);
    std::string text = stall_text(waited, round >= 0, absent);
    if (ends)
      text += std::string(". ") + stack_file::kStallShutdown +
              std::to_string(stall_.shutdown.count() / 1000);
    else
      text += " (reported once per stall; HOROVOD_STALL_CHECK_TIME_SECONDS=" +
              std::to_string(stall_.check.count() / 1000) + ")";
    lock.unlock();
    if (hooks_.stall) hooks_.stall(text, ends);
    lock.lock();
  }
}

}  // namespace hvdrun::runtime
