// ThreadFailure: an exception_ptr under a mutex plus an eventfd for the supervisor's poll.
#include "common/thread_failure.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "common/error.h"

namespace hvdrun {

ThreadFailure::ThreadFailure() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!fd_) throw_errno("creating a thread failure signal", "eventfd");
}

void ThreadFailure::set(std::exception_ptr error) noexcept {
  {
    std::lock_guard lock(mu_);
    if (error_) return;
    error_ = std::move(error);
  }
  const std::uint64_t one = 1;
  (void)!::write(fd_.get(), &one, sizeof one);
}

std::exception_ptr ThreadFailure::get() const {
  std::lock_guard lock(mu_);
  return error_;
}

void ThreadFailure::rethrow_if_failed() const {
  if (auto e = get()) std::rethrow_exception(e);
}

std::string describe(const std::exception_ptr& error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace hvdrun
