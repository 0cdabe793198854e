#include "runtime/core/generation_end.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "common/error.h"
#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

GenerationEnd::GenerationEnd() {
  event_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event_) throw_errno("libhvdrun: the generation's end mark", "eventfd");
}

void GenerationEnd::end(const std::string& why, int generation) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_.load(std::memory_order_relaxed) && generation <= generation_) return;
  generation_ = generation;
  try {
    why_ = why.empty() ? "the job's generation ended" : why;
  } catch (...) {
    // Out of memory for the reason: the mark still counts, with the default words.
  }
  ended_.store(true, std::memory_order_release);
  const std::uint64_t one = 1;
  while (::write(event_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  for (auto& [token, wake] : wakers_) wake(why_);
}

void GenerationEnd::check() const {
  if (!ended()) return;
  throw Error(reason() +
              " (this rank's collectives of the ended generation fail; hvd.elastic.run "
              "restores the last commit and joins the next generation)");
}

std::string GenerationEnd::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_.load(std::memory_order_relaxed) ? why_ : std::string();
}

int GenerationEnd::ended_generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_.load(std::memory_order_relaxed) ? generation_ : kEveryGeneration;
}

void GenerationEnd::rearm() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t count = 0;
  while (::read(event_.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  why_.clear();
  generation_ = kEveryGeneration;
  ended_.store(false, std::memory_order_release);
}

std::uint64_t GenerationEnd::on_end(std::function<void(const std::string&)> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_.load(std::memory_order_relaxed)) wake(why_);
  const std::uint64_t token = next_++;
  wakers_.emplace(token, std::move(wake));
  return token;
}

void GenerationEnd::forget(std::uint64_t token) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  wakers_.erase(token);
}

GenerationEnd& generation_end() {
  // Never destroyed: a rank's threads may still wait on it while statics are torn down.
  static auto* mark = new GenerationEnd();
  return *mark;
}

}  // namespace hvdrun::runtime
