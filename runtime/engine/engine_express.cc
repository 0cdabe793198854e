// The engine's fast paths into a round (engine.h): a caller that finds the engine idle
// runs its own round at once (express), and a small plain allreduce that every rank has
// submitted alone is carried in the round itself and finished there (express_inline).
#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/engine/engine.h"

namespace hvdrun::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool Engine::express(Slot& slot, std::unique_lock<std::mutex>& lock, const InlineResult* result,
                     std::uint64_t token) {
  // The steady state: nothing else queued or driven here, the request already cached.
  if (queue_.size() != 1 || driving_ || stopping_ || !failure_.empty() || slot.done ||
      !slot.row.empty() || (hooks_.timeline != nullptr && hooks_.timeline->enabled()))
    return false;
  const std::int64_t id = cached_id(slot.req, token);
  if (id < 0) return false;
  begin_round();
  const std::size_t bytes = inline_size(slot);
  announce_alone(id, slot.req.seq, slot.small_input, bytes);
  const std::uint64_t seen = enter_exchange(lock);
  std::exception_ptr broken = gather_briefs(&slot.req);
  // The steady-state decision from this rank's own brief; a round it refuses is decided
  // again, from every brief, as drive() decides its rounds.
  if (broken || is_control(slot.req.kind) || !agreed_steady(briefs_, cache_, book_, &brief_)) {
    go_on(slot, std::move(broken), seen, lock);
    return true;
  }
  // Every rank announced this collective alone: it runs now, as a round of drive() runs
  // what it made ready. A small allreduce whose inputs all rode in the round is reduced
  // here, from the briefs this driver owns until end_round(), as its body would.
  if (result != nullptr && bytes > 0) {
    finish_riding(*result, &slot, lock);
    return true;
  }
  plan_steady(briefs_, cache_, plan_);
  leave_exchange(lock);
  execute(plan_.ready[0], lock);
  end_round();
  return true;
}

void Engine::finish_riding(const InlineResult& result, Slot* slot,
                           std::unique_lock<std::mutex>& lock) {
  reduce_payloads_here(briefs_[0].payload(), sizeof(Brief), size_, result.recv, result.count,
                       result.dtype, result.op);
  leave_exchange(lock);
  if (slot != nullptr) {
    queue_.pop_front();  // this slot: only the driver takes slots out, others append
    // finish() but for its body: run() destroys the slot as soon as it returns, and
    // end_round() wakes whoever waits.
    slot->done = true;
  } else {
    expressing_ = false;
  }
  ++progress_;
  stall_reported_ = false;
  end_round();
}

void Engine::go_on(Slot& slot, std::exception_ptr broken, std::uint64_t seen,
                   std::unique_lock<std::mutex>& lock) {
  // Some rank announced something else: the round goes on as drive() would take it from
  // these briefs, and so do the rounds after it until this collective is done.
  Slot* fresh[kWindow] = {&slot};
  int unproductive = 0;
  if (settle(lock, std::move(broken), &slot.req, fresh, 1, false, seen, unproductive))
    drive(
        lock, [&] { return slot.done; }, unproductive);
  else
    end_round();
}

void Engine::announce_alone(std::int64_t id, std::int64_t seq, const void* input,
                            std::size_t bytes) {
  // The brief brief_of() would write for a window of this one request.
  brief_.count = 1;
  brief_.uncached = 0;
  BriefEntry e;
  e.id = static_cast<std::uint32_t>(id);
  e.seq = seq;
  brief_.set_entry(0, e);
  brief_.inline_bytes = static_cast<std::uint32_t>(bytes);
  if (bytes > 0) std::memcpy(brief_.payload(), input, bytes);
}

bool Engine::express_inline(const Request& req, Body& body, const void* input,
                            const InlineResult& result, std::uint64_t token,
                            std::unique_lock<std::mutex>& lock) {
  // express()'s state, for an unnamed allreduce whose input rides in the round.
  if (!queue_.empty() || driving_ || stopping_ || !failure_.empty() || closed_ ||
      req.name_hash != 0 || (hooks_.timeline != nullptr && hooks_.timeline->enabled()))
    return false;
  const std::size_t bytes = req.count * element_bytes(static_cast<DataType>(req.dtype));
  if (req.kind != Kind::kAllreduce || bytes == 0 || bytes > inline_limit()) return false;
  const std::int64_t id = cached_id(req, token);
  if (id < 0) return false;
  // What enqueue() does for it: its position, a new wait, one more submission.
  const std::int64_t seq = next_seq_++;
  ++progress_;
  ++submissions_;
  begin_round();
  announce_alone(id, seq, input, bytes);
  // Its request with its seq, for messages and stall reports: copied once per token.
  if (token == 0 || token != express_token_) {
    express_head_ = req;
    express_token_ = token;
  }
  express_head_.seq = seq;
  expressing_ = true;
  const std::uint64_t seen = enter_exchange(lock);
  std::exception_ptr broken = gather_briefs(&express_head_);
  if (!broken && agreed_steady(briefs_, cache_, book_, &brief_)) {
    // Every rank carried this same collective alone: its result is the briefs' payloads
    // reduced, as express() would do.
    finish_riding(result, nullptr, lock);
    return true;
  }
  // Another round: the collective becomes the oldest queued one, as if enqueue() had put it
  // there (others may have queued theirs behind it meanwhile), and the round goes on as
  // express() takes it.
  Slot local(express_head_);
  local.body = std::move(body);
  local.small_input = input;
  lock.lock();
  expressing_ = false;
  auto slot = std::shared_ptr<Slot>(std::shared_ptr<Slot>(), &local);
  queue_.push_front(slot);
  lock.unlock();
  go_on(local, std::move(broken), seen, lock);
  if (!local.done) await(slot, lock);
  if (local.error) std::rethrow_exception(local.error);
  return true;
}

}  // namespace hvdrun::runtime
