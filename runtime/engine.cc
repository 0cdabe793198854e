// The collective engine (engine.h): one mutex, one condition variable, one worker.
#include "runtime/engine.h"

#include <utility>

#include "common/thread_failure.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

Engine::Engine() : thread_([this] { worker(); }) {}

Engine::~Engine() {
  {
    std::unique_lock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::exception_ptr Engine::not_run(const std::string& what) const {
  return std::make_exception_ptr(
      Error("hvdrun: " + what + " was not run because an earlier collective failed: " + failure_));
}

void Engine::record_failure(const std::exception_ptr& error) {
  std::lock_guard lock(mu_);
  if (failure_.empty()) failure_ = describe(error);
}

void Engine::execute(Slot& slot) {
  {
    std::lock_guard lock(mu_);
    if (!failure_.empty()) {
      slot.error = not_run(slot.what);
      return;
    }
  }
  try {
    slot.task();
  } catch (...) {
    slot.error = std::current_exception();
    record_failure(slot.error);
  }
  slot.task = nullptr;  // release what the task captured before anyone waits
}

void Engine::worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !busy_ && (!queue_.empty() || stopping_); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    auto slot = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(*slot);
    lock.lock();
    busy_ = false;
    slot->done = true;
    cv_.notify_all();
  }
}

Engine::Handle Engine::submit(std::string what, Task task) {
  auto slot = std::make_shared<Slot>();
  slot->what = std::move(what);
  slot->task = std::move(task);
  Handle h = 0;
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw Error("hvdrun: " + slot->what + " submitted during shutdown");
    h = next_++;
    slots_.emplace(h, slot);
    queue_.push_back(std::move(slot));
  }
  cv_.notify_all();
  return h;
}

bool Engine::begin_inline(const char* what, std::exception_ptr* earlier) {
  std::lock_guard lock(mu_);
  if (!queue_.empty() || busy_) return false;
  busy_ = true;
  if (!failure_.empty()) *earlier = not_run(what);
  return true;
}

void Engine::end_inline() {
  std::unique_lock lock(mu_);
  busy_ = false;
  // Only the worker (with work queued meanwhile) and drain() can be waiting for this;
  // waking the idle worker for nothing costs a context switch per blocking call, which
  // on a host with more ranks than cores doubled a small allreduce's time.
  const bool wake = !queue_.empty() || stopping_ || draining_ > 0;
  lock.unlock();
  if (wake) cv_.notify_all();
}

void Engine::run_queued(const char* what, Task task) {
  auto slot = std::make_shared<Slot>();
  slot->what = what;
  slot->task = std::move(task);
  std::unique_lock lock(mu_);
  queue_.push_back(slot);
  cv_.notify_all();
  cv_.wait(lock, [&] { return slot->done; });
  if (slot->error) std::rethrow_exception(slot->error);
}

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
  cv_.wait(lock, [&] { return slot->done; });
  slots_.erase(h);
  lock.unlock();
  if (slot->error) std::rethrow_exception(slot->error);
}

std::int64_t Engine::pending() {
  std::lock_guard lock(mu_);
  return static_cast<std::int64_t>(slots_.size());
}

std::string Engine::failure() {
  std::lock_guard lock(mu_);
  return failure_;
}

void Engine::drain() {
  std::unique_lock lock(mu_);
  ++draining_;
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  --draining_;
}

}  // namespace hvdrun::runtime
