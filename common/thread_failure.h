// How an error on a background thread (the I/O threads of the rendezvous servers) reaches
// the thread that supervises it: the background thread stores the exception; the
// supervisor polls a descriptor that turns readable at that moment, and rethrows or
// describes the stored exception. An error is then reported with its real cause when it
// happens, instead of being logged on the thread while the job waits for something that
// cannot arrive any more.
#pragma once

#include <exception>
#include <mutex>
#include <string>

#include "common/fd.h"

namespace hvdrun {

/// One background thread's failure, if any. Thread-safe.
class ThreadFailure {
 public:
  /// Creates the descriptor (an eventfd). Throws SystemError.
  ThreadFailure();

  /// Records `error` (the first one wins) and makes fd() readable. Called on the failing
  /// thread, typically from `catch (...)` with std::current_exception().
  void set(std::exception_ptr error) noexcept;

  /// The recorded exception, or nullptr.
  std::exception_ptr get() const;

  /// True once set() was called.
  bool failed() const { return get() != nullptr; }

  /// Readable once set() was called (never read from: it stays readable). For poll().
  int fd() const noexcept { return fd_.get(); }

  /// Rethrows the recorded exception, if any.
  void rethrow_if_failed() const;

 private:
  mutable std::mutex mu_;
  std::exception_ptr error_;
  UniqueFd fd_;
};

/// The message of an exception held in `error` ("unknown error" for a non-std one).
std::string describe(const std::exception_ptr& error);

}  // namespace hvdrun
