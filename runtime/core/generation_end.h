// The end mark of this process's job generation: set when the launcher says the
// generation is over (in-process elastic recovery, docs/elastic.md), it makes every wait of
// the host paths fail at once with the reason instead of at HVDRUN_OP_TIMEOUT. One mark per
// process: every communicator of a generation belongs to the same job.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "common/fd.h"

namespace hvdrun::runtime {

/// Process-wide; get it with generation_end().
class GenerationEnd {
 public:
  GenerationEnd();
  GenerationEnd(const GenerationEnd&) = delete;
  GenerationEnd& operator=(const GenerationEnd&) = delete;

  /// Every generation: what an end without a number (the agent gone) reaches.
  static constexpr int kEveryGeneration = std::numeric_limits<int>::max();
  /// Ends generation `generation` with `why`: the mark is set, fd() becomes readable and
  /// every registered waker runs. While ended, only an end of a later generation counts
  /// (it replaces the reason); an equal or earlier one is ignored. Never throws.
  void end(const std::string& why, int generation = kEveryGeneration) noexcept;
  /// The generation the mark ended (kEveryGeneration when not ended).
  int ended_generation() const;
  /// True once end() was called (since the last rearm()).
  bool ended() const noexcept { return ended_.load(std::memory_order_acquire); }
  /// Throws Error with the reason when the generation has ended.
  void check() const;
  /// The reason given to end() ("" when not ended).
  std::string reason() const;
  /// An eventfd that is readable while the generation is ended: poll it with sockets.
  int fd() const noexcept { return event_.get(); }
  /// Clears the mark for the next generation (init()). Never throws.
  void rearm() noexcept;

  /// Runs `wake` (which must not throw, block or call into this object) when the
  /// generation ends, until the returned token is passed to forget(); runs it at once when
  /// the generation has already ended.
  std::uint64_t on_end(std::function<void(const std::string&)> wake);
  /// Unregisters a waker; returns only once it is not running.
  void forget(std::uint64_t token) noexcept;

 private:
  std::atomic<bool> ended_{false};
  mutable std::mutex mu_;  // guards why_, wakers_, next_ and the wakers' runs
  std::string why_;
  int generation_ = kEveryGeneration;
  std::map<std::uint64_t, std::function<void(const std::string&)>> wakers_;
  std::uint64_t next_ = 1;
  UniqueFd event_;
};

/// The process's mark.
GenerationEnd& generation_end();

/// A waker registered for the lifetime of its owner.
class EndWaker {
 public:
  explicit EndWaker(std::function<void(const std::string&)> wake)
      : token_(generation_end().on_end(std::move(wake))) {}
  ~EndWaker() { generation_end().forget(token_); }
  EndWaker(const EndWaker&) = delete;
  EndWaker& operator=(const EndWaker&) = delete;

 private:
  std::uint64_t token_;
};

}  // namespace hvdrun::runtime
