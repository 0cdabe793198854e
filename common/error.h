// Error types shared by every hvdrun library. Each carries its context once, attached
// at the boundary where it was raised; the one place that tears a job down maps the type
// to an exit code (UsageError -> 2, everything else before ranks start -> 255).
#pragma once

#include <stdexcept>
#include <string>

namespace hvdrun {

/// Bad input found before anything started: a malformed flag, host list or hostfile line.
/// The message says what was wrong, where, and what is expected. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The job could not be launched (preflight, agent start, rendezvous). Exit code 255.
class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A failed system call: "<context>: <syscall>: <strerror(errno)>".
class SystemError : public std::runtime_error {
 public:
  /// `context` says what was being done and to what (host, port, path); `syscall` names
  /// the call that failed; `err` is its errno.
  SystemError(const std::string& context, const char* syscall, int err);
  /// The errno value the failed call reported.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

/// Throws SystemError(context, syscall, errno) — for the common `if (rc < 0)` path.
[[noreturn]] void throw_errno(const std::string& context, const char* syscall);

}  // namespace hvdrun
