// The collective engine (engine.h): one mutex, one condition variable, a worker thread
// that drives rounds when no caller does; submission, waiting, and running what a round
// made ready. The round itself, and run()'s ways into it, are in engine_round.cc, the
// thread that watches for stalls in engine_stalls.cc.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include "common/thread_failure.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

namespace {

// Timeline rows and phases, as Horovod names them: "allreduce.grad.fc1" (or
// "allreduce.noname.12"), phases NEGOTIATE_ALLREDUCE then ALLREDUCE.
std::string row_of(const Request& q) {
  std::string row = kind_name(q.kind);
  if (q.name_hash != 0)
    row += "." + std::string(q.name, strnlen(q.name, sizeof q.name));
  else
    row += ".noname." + std::to_string(q.seq);
  return row;
}

std::string phase_of(const Request& q) {
  std::string k = kind_name(q.kind);
  for (auto& c : k) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return k;
}

}  // namespace

Engine::Engine(Hooks hooks, int size, StallPolicy stall)
    : hooks_(std::move(hooks)),
      size_(size),
      stall_(stall),
      thread_([this] { worker(); }),
      stall_thread_([this] { watch_stalls(); }) {}

Engine::~Engine() { stop(); }

void Engine::stop() {
  {
    std::unique_lock lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    cv_.notify_all();
    worker_cv_.notify_all();
    stall_cv_.notify_all();
    // A driver still inside a round finishes it first; nothing new starts after.
    ++waiting_;
    cv_.wait(lock, [&] { return !driving_; });
    --waiting_;
    if (!queue_.empty())
      fail_all(std::make_exception_ptr(
          Error("hvdrun: the library was shut down before this collective ran")));
    stopped_ = true;
  }
  cv_.notify_all();
  worker_cv_.notify_all();
  stall_cv_.notify_all();
  thread_.join();
  stall_thread_.join();
}

std::exception_ptr Engine::not_run(const std::string& what) const {
  return std::make_exception_ptr(
      Error("hvdrun: " + what + " was not run because an earlier collective failed: " + failure_));
}

void Engine::fail_all(const std::exception_ptr& error, std::size_t attempted) {
  if (failure_.empty()) failure_ = describe(error);
  for (auto& s : queue_) {
    if (!s->row.empty() && hooks_.timeline != nullptr) hooks_.timeline->end_all(s->row);
    s->error = attempted > 0 ? error : not_run(label(s->req));
    if (attempted > 0) --attempted;
    s->done = true;
  }
  queue_.clear();
  wake_waiters();
}

void Engine::release_name(const Request& req) {
  if (req.name_hash == 0) return;
  auto it = names_.find(req.name_hash);
  if (it != names_.end()) names_.erase(it);
}

std::shared_ptr<Engine::Slot> Engine::enqueue(std::shared_ptr<Slot> slot,
                                              std::unique_lock<std::mutex>& lock) {
  (void)lock;
  Request& req = slot->req;
  if (stopping_) throw Error("hvdrun: " + label(req) + " submitted during shutdown");
  // The job is over here: the collective gets a handle that has already failed, and
  // holds no name.
  auto failed = [&](std::exception_ptr error) {
    auto f = std::make_shared<Slot>();
    f->req = req;
    f->req.name_hash = 0;
    f->error = std::move(error);
    f->done = true;
    return f;
  };
  if (closed_)
    return failed(std::make_exception_ptr(
        Error("hvdrun: " + label(req) + " was submitted after " + closed_by_ +
              " shut the job down, which shut this rank down too; call init() to join again")));
  if (!failure_.empty()) return failed(not_run(label(req)));
  if (req.name_hash != 0 && names_.count(req.name_hash) > 0)
    throw DuplicateName("hvdrun: " + label(req) +
                        " was submitted while another collective named '" + req.name +
                        "' is still in flight on this rank; wait for it (synchronize its "
                        "handle) first, or give each concurrent collective its own name");
  if (req.name_hash == 0 && req.kind != Kind::kJoin && req.kind != Kind::kShutdown)
    req.seq = next_seq_++;
  if (req.name_hash != 0) names_.insert(req.name_hash);
  if (hooks_.timeline != nullptr && hooks_.timeline->enabled()) {
    slot->row = row_of(req);
    hooks_.timeline->negotiate_begin(slot->row, phase_of(req));
  }
  if (queue_.empty()) ++progress_;  // a new wait begins
  queue_.push_back(slot);
  ++submissions_;
  // A driver pausing after a round that agreed on nothing takes this at once. (The
  // worker is woken by submit() alone: a blocking caller drives by itself, and waking
  // an idle thread per call costs a context switch on a busy host.)
  if (pausing_) cv_.notify_all();
  return slot;
}

std::shared_ptr<Engine::Slot> Engine::make_slot(const Request& req, Body body, Body then,
                                                const void* small_input) {
  auto slot = std::make_shared<Slot>();
  slot->req = req;
  slot->body = std::move(body);
  slot->then = std::move(then);
  slot->small_input = small_input;
  return slot;
}

Engine::Handle Engine::submit(Request req, Body body, Body then, const void* small_input) {
  std::unique_lock lock(mu_);
  auto slot = enqueue(make_slot(req, std::move(body), std::move(then), small_input), lock);
  const Handle h = next_++;
  slots_.emplace(h, std::move(slot));
  if (!driving_) worker_cv_.notify_one();
  return h;
}

void Engine::await(const std::shared_ptr<Slot>& slot, std::unique_lock<std::mutex>& lock) {
  while (!slot->done) {
    if (!driving_ && !stopping_) {
      drive(lock, slot.get());
    } else {
      ++waiting_;
      cv_.wait(lock, [&] { return slot->done || (!driving_ && !stopping_); });
      --waiting_;
    }
  }
}

std::uint64_t Engine::new_token() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::int64_t Engine::cached_id(const Request& req, std::uint64_t token) {
  if (token != 0 && token == token_ && token_epoch_ == cache_.epoch()) return token_id_;
  const std::int64_t id = cache_.find(req);
  if (token != 0 && id >= 0) {
    token_ = token;
    token_id_ = id;
    token_epoch_ = cache_.epoch();
  }
  return id;
}

void Engine::execute(const Ready& rd, std::unique_lock<std::mutex>& lock) {
  std::shared_ptr<Slot> mine;
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if (same_key((*it)->req, rd.request)) {
      mine = std::move(*it);
      if (it == queue_.begin())
        queue_.pop_front();
      else
        queue_.erase(it);
      break;
    }
  if (!mine) {
    // Not submitted here: this rank has joined and stands in (or, for a collective that
    // failed to agree, does nothing). Its unnamed count follows the others'.
    if (rd.request.seq >= 0) next_seq_ = std::max(next_seq_, rd.request.seq + 1);
    if (!rd.error.empty() || rd.inline_data || rd.request.kind == Kind::kJoin ||
        rd.request.kind == Kind::kShutdown)
      return;
    lock.unlock();
    try {
      hooks_.stand_in(rd);
    } catch (...) {
      lock.lock();
      fail_all(std::current_exception());
      return;
    }
    lock.lock();
    return;
  }
  Timeline* tl = mine->row.empty() ? nullptr : hooks_.timeline;
  if (tl != nullptr) {
    tl->negotiate_end(mine->row);
    if (rd.error.empty()) tl->begin(mine->row, phase_of(rd.request));
  }
  if (!rd.error.empty()) {
    mine->error = std::make_exception_ptr(Error("hvdrun: " + rd.error));
  } else if (rd.request.kind == Kind::kJoin) {
    mine->result = rd.last_joined;
  } else if (rd.request.kind == Kind::kShutdown) {
    // Everything still queued can never run now.
    for (auto& s : queue_) {
      s->error = std::make_exception_ptr(
          Error("hvdrun: " + label(s->req) + " did not run: the job was shut down"));
      s->done = true;
    }
    queue_.clear();
    if (mine->body == nullptr && mine->req.seq == kAutoShutdown)
      closed_.store(true, std::memory_order_release);
  } else if (mine->body || mine->then) {
    // A collective that rode in the round (rd.inline_data) only reduces the round's
    // payloads: its body runs without the lock given up and taken back (Body's contract).
    // Any other body moves data, and submitters must not wait on the lock meanwhile.
    const bool keep_lock = rd.inline_data && !mine->then;
    if (!keep_lock) lock.unlock();
    bool fatal = false;
    try {
      // The transports mark their phases on this collective's row (timeline.h).
      const TimelineRow current(tl, mine->row);
      if (mine->body) mine->body(rd);
    } catch (const Refused&) {
      mine->error = std::current_exception();
    } catch (...) {
      mine->error = std::current_exception();
      fatal = true;
    }
    if (!mine->error && mine->then) mine->then(rd);
    if (!keep_lock) lock.lock();
    if (fatal) fail_all(mine->error);
  }
  if (tl != nullptr) tl->end_all(mine->row, tensor_type(rd.request), tensor_shape(rd.request));
  finish(*mine);
}

void Engine::finish(Slot& slot) {
  slot.body = nullptr;  // release what they captured before anyone waits
  slot.then = nullptr;
  slot.done = true;
  ++progress_;
  stall_reported_ = false;
  wake_waiters();
}

void Engine::mark_ready(bool from_briefs) {
  // Which rank announced which of this rank's collectives in this round.
  for (const auto& s : queue_) {
    if (s->row.empty()) continue;
    for (int r = 0; r < size_; ++r) {
      bool has = false;
      if (from_briefs) {
        const Brief& b = briefs_[static_cast<std::size_t>(r)];
        for (std::uint32_t i = 0; i < b.count && i < static_cast<std::uint32_t>(kWindow) && !has;
             ++i) {
          const BriefEntry e = b.entry(i);
          if (e.id >= cache_.size()) continue;
          Request q = cache_.at(e.id);
          q.seq = e.seq;
          has = same_key(q, s->req);
        }
      } else {
        const Window& w = table_[static_cast<std::size_t>(r)];
        for (std::uint32_t i = 0; i < w.count && !has; ++i) has = same_key(w.requests[i], s->req);
      }
      if (has) hooks_.timeline->rank_ready(s->row, r);
    }
  }
}

void Engine::wake_waiters() {
  if (waiting_ > 0) cv_.notify_all();
}

void Engine::join_shutdown(const std::vector<Window>& table) {
  int leaving = -1;
  for (int r = 0; r < static_cast<int>(table.size()) && leaving < 0; ++r) {
    const Window& w = table[static_cast<std::size_t>(r)];
    for (std::uint32_t i = 0; i < w.count; ++i)
      if (w.requests[i].kind == Kind::kShutdown) leaving = r;
  }
  if (leaving < 0) return;
  for (const auto& s : queue_)
    if (s->req.kind == Kind::kShutdown) return;  // asked already
  auto slot = std::make_shared<Slot>();
  slot->req = make_request(Kind::kShutdown, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr);
  slot->req.seq = kAutoShutdown;
  closed_by_ = "rank " + std::to_string(leaving);
  queue_.push_back(std::move(slot));
  ++submissions_;
}

bool Engine::closed() { return closed_.load(std::memory_order_acquire); }

void Engine::worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    worker_cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !driving_); });
    if (stopping_) return;
    drive(lock, nullptr);
  }
}

bool Engine::waits() const { return !queue_.empty() || expressing_; }

std::shared_ptr<Engine::Slot> Engine::find(Handle h, const char* fn) {
  auto it = slots_.find(h);
  if (it == slots_.end())
    throw Error(std::string("hvdrun::") + fn + ": handle " + std::to_string(h) +
                " is unknown or was already waited for");
  return it->second;
}

bool Engine::poll(Handle h) {
  std::lock_guard lock(mu_);
  return find(h, "poll")->done;
}

void Engine::wait(Handle h) {
  std::unique_lock lock(mu_);
  auto slot = find(h, "wait");
  await(slot, lock);
  slots_.erase(h);
  release_name(slot->req);
  lock.unlock();
  if (slot->error) std::rethrow_exception(slot->error);
}

std::int64_t Engine::seq_of(Handle h) {
  std::lock_guard lock(mu_);
  return find(h, "seq_of")->req.seq;
}

std::int64_t Engine::pending() {
  std::lock_guard lock(mu_);
  return static_cast<std::int64_t>(slots_.size());
}

std::string Engine::failure() {
  std::lock_guard lock(mu_);
  return failure_;
}

int Engine::join() {
  std::unique_lock lock(mu_);
  auto slot = enqueue(
      make_slot(make_request(Kind::kJoin, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr)),
      lock);
  await(slot, lock);
  if (slot->error) std::rethrow_exception(slot->error);
  return slot->result;
}

bool Engine::shutdown() {
  std::unique_lock lock(mu_);
  if (!failure_.empty()) return false;
  auto slot = enqueue(
      make_slot(make_request(Kind::kShutdown, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr)),
      lock);
  await(slot, lock);
  return failure_.empty();
}

}  // namespace hvdrun::runtime
