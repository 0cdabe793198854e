// The engine's round (engine.h): the one way from this rank's brief to a finished round,
// whoever drives it (the worker, a waiter, or a blocking caller that finds the engine
// idle), and what a round announces: the window of the queue's head, or one cached
// collective alone (run()'s steady state), whose small input may ride in the brief and
// be reduced straight into the caller's result without a slot ever being built.
#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/engine/engine.h"

namespace hvdrun::runtime {

namespace {

// Pause after a round that made nothing ready (ranks submitted in different orders, or
// some wait for a named collective others have not reached): short at first, then up to
// 2 ms, so mismatched queues cost little CPU and a new submission still ends it at once.
std::chrono::milliseconds round_backoff(int unproductive) {
  return std::chrono::milliseconds(std::min(2, unproductive / 8));
}

// A pointer the queue holds without owning: the slot lives on the stack of the run() that
// waits for it, which returns only once the slot is done and out of the queue (no
// allocation).
template <typename T>
std::shared_ptr<T> unowned(T* p) {
  return std::shared_ptr<T>(std::shared_ptr<T>(), p);
}

}  // namespace

// Inlined into round(), its only caller: on the steady state's path.
[[gnu::always_inline]] inline void Engine::announce_alone(const Alone& alone) {
  // The brief brief_of() would write for a window of this one request, and whether its
  // data carries it.
  brief_.count = 1;
  brief_.uncached = 0;
  brief_.led = alone.lead != nullptr ? 1 : 0;
  BriefEntry e;
  e.id = static_cast<std::uint32_t>(alone.id);
  e.seq = alone.req->seq;
  brief_.set_entry(0, e);
  brief_.inline_bytes = static_cast<std::uint32_t>(alone.bytes);
  if (alone.bytes > 0) std::memcpy(brief_.payload(), alone.input, alone.bytes);
}

inline void Engine::finish_riding(Alone& alone) {
  if (alone.slot != nullptr) {
    queue_.pop_front();  // its slot: only the driver takes slots out, others append
    // finish() but for its body: run() destroys the slot as soon as it returns, and
    // end_round() wakes whoever waits.
    alone.slot->done = true;
  } else {
    expressing_ = false;
  }
  ++progress_;
  stall_reported_ = false;
}

// Inlined into drive_inline(), its only caller.
[[gnu::always_inline]] inline bool Engine::round(std::unique_lock<std::mutex>& lock, Alone* alone,
                                                 int& unproductive) {
  Slot* fresh[kWindow];
  std::uint32_t count = 0;
  const Request* head = nullptr;  // for the transport's message
  const Lead* lead = nullptr;     // alone's, read once
  if (alone != nullptr) {
    lead = alone->lead;
    announce_alone(*alone);
    head = alone->req;
  } else {
    count = fresh_slots(fresh);
    fill_window(fresh, count);
    brief_of(window_, cache_, brief_);
    // The slot stays put while this driver exchanges: only the driver takes slots out of
    // the queue, and others only append.
    head = &queue_.front()->req;
  }
  const std::uint64_t seen = enter_exchange(lock);
  // mu_ not held: the briefs, the windows, the cache, the book and the plan are the
  // driver's alone, and so is `alone`.
  bool led = false;  // its lead moved the data
  std::exception_ptr broken = lead != nullptr ? lead_round(*alone, led) : gather_briefs(head);
  Decision how = Decision::kSteady;
  if (led && !broken) {
    how = Decision::kRode;
  } else if (!broken && alone != nullptr && lead == nullptr &&
             agreed_steady(briefs_, cache_, book_, &brief_)) {
    // Every rank announced this collective alone. A small allreduce whose every input
    // rode in the round is reduced here, from the briefs, as its body would; any other
    // runs as the one collective the round made ready.
    if (alone->result != nullptr && alone->bytes > 0) {
      how = Decision::kRode;
      const InlineResult& r = *alone->result;
      reduce_payloads_here(briefs_[0].payload(), sizeof(Brief), size_, r.recv, r.count, r.dtype,
                           r.op);
    } else {
      plan_steady(briefs_, cache_, plan_);
      fresh[count++] = alone->slot;  // queued: only a small allreduce rides unqueued
    }
  } else {
    // Decided again from every brief, as any round is; what this rank announced alone is
    // its window.
    if (alone != nullptr) fresh[count++] = slot_of(*alone);
    if (!broken) how = decide(fresh, count, alone == nullptr, head, broken);
  }
  leave_exchange(lock);
  if (how == Decision::kRode) {
    finish_riding(*alone);
    return true;
  }
  if (alone != nullptr && alone->slot == nullptr) {
    // Not queued until now: the oldest collective, as if enqueue() had put it there
    // (others may have queued theirs behind it meanwhile).
    alone->slot = fresh[0];
    queue_.push_front(alone->built);
    expressing_ = false;
  }
  if (broken) {
    fail_all(broken, 1);  // the oldest failed with it, the rest were not run
    return false;
  }
  if (run_ready(how, fresh, count, lock)) {
    unproductive = 0;
    return true;
  }
  // Nothing was ready and nothing new was announced: wait a little (or for a new
  // submission) before the next round.
  const auto pause = round_backoff(++unproductive);
  if (pause.count() > 0) {
    pausing_ = true;
    cv_.wait_for(lock, pause, [&] { return submissions_ != seen || stopping_; });
    pausing_ = false;
  }
  return true;
}

// drive()'s body, inlined into drive() and into run_unqueued() (itself inlined into run()):
// the steady state of a small allreduce, the hottest call of the library, pays for run()'s
// frame alone.
[[gnu::always_inline]] inline void Engine::drive_inline(std::unique_lock<std::mutex>& lock,
                                                        const Slot* until, Alone* alone) {
  begin_round();
  int unproductive = 0;
  while (alone != nullptr || (!queue_.empty() && (until == nullptr || !until->done) &&
                              failure_.empty() && !stopping_)) {
    const bool going = round(lock, alone, unproductive);
    if (alone != nullptr) {
      // Its slot from now on; none when it was never queued and the round finished it.
      until = alone->slot;
      alone = nullptr;
      if (until == nullptr) break;
    }
    if (!going) break;
  }
  end_round();
}

void Engine::drive(std::unique_lock<std::mutex>& lock, const Slot* until, Alone* alone) {
  drive_inline(lock, until, alone);
}

[[gnu::always_inline]] inline bool Engine::run_unqueued(const Request& req, Body& body,
                                                        const void* input,
                                                        const InlineResult& result,
                                                        std::uint64_t token,
                                                        std::unique_lock<std::mutex>& lock) {
  if (!queue_.empty() || !may_go_alone() || closed_ || req.name_hash != 0) return false;
  const std::size_t bytes = req.count * element_bytes(static_cast<DataType>(req.dtype));
  if (req.kind != Kind::kAllreduce || bytes == 0 || bytes > inline_limit()) return false;
  Alone alone;
  alone.id = cached_id(req, token);
  if (alone.id < 0) return false;
  // What enqueue() does for it: its position, a new wait, one more submission. Its request
  // with its seq, for messages and stall reports, is copied once per token.
  const std::int64_t seq = next_seq_++;
  ++progress_;
  ++submissions_;
  if (token == 0 || token != express_token_) {
    express_head_ = req;
    express_token_ = token;
  }
  express_head_.seq = seq;
  expressing_ = true;
  alone.req = &express_head_;
  alone.input = input;
  alone.bytes = bytes;
  alone.result = &result;
  alone.body = &body;
  drive_inline(lock, nullptr, &alone);
  if (alone.slot == nullptr) return true;  // it rode, and is done
  // The round queued it as the oldest collective: waited for as any other.
  if (!alone.slot->done) await(alone.built, lock);
  if (alone.slot->error) std::rethrow_exception(alone.slot->error);
  return true;
}

void Engine::run(const Request& req, Body body, const void* small_input, const InlineResult* result,
                 std::uint64_t token) {
  std::unique_lock lock(mu_);
  if (small_input != nullptr && result != nullptr &&
      run_unqueued(req, body, small_input, *result, token, lock))
    return;
  run_queued(req, std::move(body), small_input, result, token, nullptr, lock);
}

void Engine::run(const Request& req, Body body, std::uint64_t token, const Lead& lead) {
  std::unique_lock lock(mu_);
  run_queued(req, std::move(body), nullptr, nullptr, token, lead ? &lead : nullptr, lock);
}

[[gnu::noinline]] void Engine::run_queued(const Request& req, Body body, const void* small_input,
                                          const InlineResult* result, std::uint64_t token,
                                          const Lead* lead, std::unique_lock<std::mutex>& lock) {
  Slot local(req);
  local.body = std::move(body);
  local.small_input = small_input;
  auto slot = enqueue(unowned(&local), lock);
  // Alone in the queue and cached: announced alone, its first round driven at once.
  Alone alone;
  if (!slot->done && slot->row.empty() && !is_control(slot->req.kind) && queue_.size() == 1 &&
      may_go_alone())
    alone.id = cached_id(slot->req, token);
  if (alone.id >= 0) {
    alone.req = &slot->req;
    alone.slot = slot.get();
    alone.input = slot->small_input;
    alone.bytes = inline_size(*slot);
    alone.result = small_input != nullptr ? result : nullptr;
    // A lead carries the round's blocks as they are, which takes the blocks the round moves
    // to be whole briefs: rounds inside one host (kInlineBytesLocal).
    if (alone.bytes == 0 && inline_limit() == kInlineCapacity) alone.lead = lead;
    drive(lock, slot.get(), &alone);
  }
  if (!slot->done) await(slot, lock);
  release_name(slot->req);
  if (slot->error) std::rethrow_exception(slot->error);
}

Engine::Slot* Engine::slot_of(Alone& alone) {
  if (alone.slot != nullptr) return alone.slot;
  alone.built = make_slot(*alone.req, std::move(*alone.body), nullptr, alone.input);
  return alone.built.get();
}

Engine::Decision Engine::decide(Slot** fresh, std::uint32_t count, bool window_built,
                                const Request* head, std::exception_ptr& broken) {
  try {
    // Whole windows only when some rank has a request not cached yet.
    if (needs_windows(briefs_)) {
      if (!window_built) fill_window(fresh, count);
      gather(&window_, Window::block(window_.inline_bytes), table_.data(),
             Window::block(inline_limit()), sizeof(Window), head);
      return Decision::kLearned;
    }
    // Every request cached: the steady state needs no plan(), any other round is planned
    // from the windows the briefs rebuild.
    if (agreed_steady(briefs_, cache_, book_)) {
      plan_steady(briefs_, cache_, plan_);
      return Decision::kSteady;
    }
    expand(briefs_, cache_, table_);
  } catch (...) {
    broken = std::current_exception();
  }
  return Decision::kExpanded;
}

bool Engine::run_ready(Decision how, Slot** fresh, std::uint32_t count,
                       std::unique_lock<std::mutex>& lock) {
  for (std::uint32_t i = 0; i < count; ++i) fresh[i]->announced = true;
  bool news = false;  // did any rank announce something this round
  for (const auto& b : briefs_) news = news || b.count > 0;
  const bool steady = how == Decision::kSteady;
  if (hooks_.timeline != nullptr && hooks_.timeline->enabled()) mark_ready(steady);
  if (!steady) {
    plan_ = plan(table_, book_);
    if (how == Decision::kLearned) cache_.learn(table_, plan_);
    // Kept for stall reports, which need it only while rounds agree on nothing.
    if (plan_.ready.empty()) last_book_ = book_;
    // As in Horovod, one rank's shutdown shuts every rank down: a rank that sees another
    // leave asks to leave too (the others' collectives it never submits fail meanwhile).
    join_shutdown(table_);
  }
  for (const auto& rd : plan_.ready) {
    execute(rd, lock);
    if (!failure_.empty()) break;
  }
  return !plan_.ready.empty() || news;
}

std::uint32_t Engine::fresh_slots(Slot** fresh) {
  // The collectives not announced yet, oldest first.
  std::uint32_t count = 0;
  for (const auto& s : queue_) {
    if (count == static_cast<std::uint32_t>(kWindow)) break;
    if (!s->announced) fresh[count++] = s.get();
  }
  return count;
}

void Engine::fill_window(Slot* const* fresh, std::uint32_t count) {
  // The first collective's input rides in the round when it is small enough
  // (Window::payload).
  Window& mine = window_;
  mine.count = count;
  mine.inline_bytes = 0;
  for (std::uint32_t i = 0; i < count; ++i) mine.requests[i] = fresh[i]->req;
  if (count > 0) {
    const std::size_t bytes = inline_size(*fresh[0]);
    if (bytes > 0) {
      std::memcpy(mine.payload, fresh[0]->small_input, bytes);
      mine.inline_bytes = static_cast<std::uint32_t>(bytes);
    }
  }
}

std::size_t Engine::inline_size(const Slot& s) const {
  if (s.small_input == nullptr) return 0;
  const std::size_t bytes = s.req.count * element_bytes(static_cast<DataType>(s.req.dtype));
  return bytes <= inline_limit() ? bytes : 0;
}

void Engine::begin_round() {
  driving_ = true;
  if (briefs_.empty()) {  // sized once: the job's size does not change
    table_.resize(static_cast<std::size_t>(size_));
    briefs_.resize(static_cast<std::size_t>(size_));
  }
}

void Engine::end_round() {
  driving_ = false;
  // A waiter may take over driving; anything left otherwise is the worker's.
  wake_waiters();
  if (!queue_.empty()) worker_cv_.notify_one();
}

std::uint64_t Engine::enter_exchange(std::unique_lock<std::mutex>& lock) {
  if (hooks_.timeline != nullptr) hooks_.timeline->cycle();
  const std::uint64_t seen = submissions_;
  exchanging_round_ = rounds_;
  lock.unlock();
  return seen;
}

void Engine::leave_exchange(std::unique_lock<std::mutex>& lock) {
  lock.lock();
  exchanging_round_ = -1;
  ++rounds_;
}

std::exception_ptr Engine::lead_round(Alone& alone, bool& finished) {
  try {
    // Its data goes on only when every rank announced it alone and led it: every brief is
    // this rank's own, `led` included (agreed_steady(), which counts the round then).
    const std::function<bool()> agreed = [this] {
      return agreed_steady(briefs_, cache_, book_, &brief_);
    };
    finished = (*alone.lead)(&brief_, brief_.bytes(), briefs_.data(), sizeof(Brief), agreed);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

std::exception_ptr Engine::gather_briefs(const Request* head) {
  try {
    gather(&brief_, brief_.bytes(), briefs_.data(), Brief::block(inline_limit()), sizeof(Brief),
           head);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

void Engine::gather(const void* mine, std::size_t used, void* all, std::size_t block,
                    std::size_t stride, const Request* head) {
  if (block == stride) {
    hooks_.exchange(mine, used, all, block, head);
    return;
  }
  // Across hosts whole blocks travel: they are cut to what the limit can fill, then each
  // is put at its rank's place.
  packed_.resize(block * static_cast<std::size_t>(size_));
  hooks_.exchange(mine, std::min(used, block), packed_.data(), block, head);
  auto* out = static_cast<unsigned char*>(all);
  for (std::size_t r = 0; r < static_cast<std::size_t>(size_); ++r)
    std::memcpy(out + r * stride, packed_.data() + r * block, block);
}

}  // namespace hvdrun::runtime
