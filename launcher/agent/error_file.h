// The ranks' error files: each rank of a host gets TORCHELASTIC_ERROR_FILE (and
// HVDRUN_ERROR_FILE, the same path) in a private directory its agent makes for the job; a
// rank that dies of an uncaught Python exception leaves its traceback there as torchelastic's
// JSON (hvdrun.torch and hvdrun.tensorflow write it, and so does torch's own @record), and
// the agent sends it back with the rank's exit report. docs/diagnosis.md#error-files.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hvdrun::launcher {

/// A directory (0700) holding the error files and stack files of one agent's ranks, on a
/// memory file system where the user has one ($XDG_RUNTIME_DIR, else /dev/shm), else under
/// $TMPDIR or /tmp; removed with its files when destroyed.
class ErrorDir {
 public:
  /// Makes `hvdrun-errors-JOB-XXXXXX`. Throws SystemError when it cannot.
  explicit ErrorDir(const std::string& job_id);
  ~ErrorDir();
  ErrorDir(const ErrorDir&) = delete;
  ErrorDir& operator=(const ErrorDir&) = delete;

  /// The error file of the rank the agent knows by `rank`; removed first, so that a file
  /// a former rank of that number left is never taken for this one's.
  std::string fresh_path(int rank) const;
  /// The same path, as it is.
  std::string path(int rank) const;
  /// The stack file of that rank (common/stack_file.h), made afresh, empty, mode 0600.
  /// Throws SystemError when it cannot be made.
  std::string fresh_stack_path(int rank) const;
  /// The same path, as it is.
  std::string stack_path(int rank) const;

 private:
  std::string dir_;
};

/// What torchelastic's error file `json` says: message.extraInfo.py_callstack (the
/// traceback), else the message itself; nullopt when it is no such file. The message may also
/// be a plain string (torchelastic's older format).
std::optional<std::string> error_file_traceback(std::string_view json);

/// The traceback of the error file at `path` (read up to `max_bytes`; a longer traceback keeps
/// its end), or empty when there is no file or no traceback in it.
std::string read_error_file(const std::string& path, std::size_t max_bytes = 64u << 10);

}  // namespace hvdrun::launcher
