// Process helpers for end-to-end tests and benchmarks: run a program (usually the built
// hvdrun) with its stdout and stderr collected under deadlines, find processes by an
// environment marker, process group or pid file, and wait until none of them is alive.
// Failures throw std::runtime_error (no test framework here), which a Catch2 test case
// reports as a failure with the message.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"

namespace hvdrun::testing {

/// How much slower than a plain build this build runs (ASan, TSan): time bounds in tests
/// are multiplied by it.
#ifdef HVDRUN_SANITIZED_BUILD
inline constexpr int kSlowdown = 4;
#else
inline constexpr int kSlowdown = 1;
#endif

/// The hvdrun binary of this build tree (<build>/cli/hvdrun).
std::string hvdrun_binary();

/// A child process with stdin on /dev/null and its stdout and stderr each read into a
/// string. The destructor SIGKILLs and reaps it if it is still running.
class CapturedProcess {
 public:
  /// Starts `argv` (argv[0] a path or a name looked up in PATH). `extra_env` entries
  /// ("NAME=value") replace same-named ones of this process's environment or are added;
  /// `cwd`, when not empty, is the child's working directory.
  explicit CapturedProcess(std::vector<std::string> argv, std::vector<std::string> extra_env = {},
                           const std::string& cwd = {});
  ~CapturedProcess();
  CapturedProcess(const CapturedProcess&) = delete;
  CapturedProcess& operator=(const CapturedProcess&) = delete;

  /// Reads output until `pred(out)` holds; throws at the deadline or when output ends
  /// first (the message quotes stderr so far).
  void read_until(const std::function<bool(const std::string&)>& pred,
                  std::chrono::milliseconds within = std::chrono::seconds(15));
  /// Reads both streams to EOF and reaps the process; returns its exit code, or
  /// 128+signal when a signal ended it. Throws at the deadline.
  int wait(std::chrono::milliseconds within = std::chrono::seconds(30));
  /// Sends `sig` to the process (no-op once reaped).
  void signal(int sig) const;
  /// The pid (-1 once reaped).
  pid_t pid() const { return pid_; }
  /// Stops reading stdout: closes the read end, so the child's next write gets EPIPE.
  void close_stdout() { out_fd_.reset(); }
  /// From now on stdout bytes go to `sink` instead of `out` (for output too large to
  /// keep: count and check it as it streams by).
  void stream_stdout(std::function<void(std::string_view)> sink) { sink_ = std::move(sink); }
  /// After wait(): the largest resident set of the process or its reaped descendants, KiB.
  long max_rss_kib() const { return max_rss_kib_; }

  /// Everything read so far from stdout and stderr.
  std::string out, err;

 private:
  // One round of poll+read; false once both pipes are at EOF (or closed).
  bool pump(std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  UniqueFd out_fd_, err_fd_;
  std::function<void(std::string_view)> sink_;
  long max_rss_kib_ = 0;
};

/// A CapturedProcess running hvdrun_binary() with `args`.
class Hvdrun : public CapturedProcess {
 public:
  explicit Hvdrun(std::vector<std::string> args, std::vector<std::string> extra_env = {},
                  const std::string& cwd = {});
};

/// A temp dir (/tmp/hvdrun-<tag>-XXXXXX) removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// The whole file (binary); empty when it cannot be read.
std::string read_file(const std::string& path);
/// Writes `text` to `path` (created or truncated).
void write_text(const std::string& path, const std::string& text);
/// Runs `script` with sh as the user nobody (runuser), as another local user would act;
/// returns its exit status, and on failure writes the script and its stderr to stderr.
int as_nobody(const std::string& script);
/// Number of positions in `s` at which `what` starts.
int count(const std::string& s, const std::string& what);
/// `s` split at '\n' (a final partial line counts; no empty last element).
std::vector<std::string> lines(const std::string& s);
/// hvdrun's stderr `err` without its warnings about connections from outside the job (to
/// its rendezvous or Horovod rendezvous: unauthenticated, a wrong secret, refused as not the
/// job's): any process on the machine can cause those, so a test that expects a quiet job
/// checks this instead of the whole stderr.
std::string without_outside_connections(const std::string& err);
/// Milliseconds since `t0` (steady clock), for the figures the fault tests report.
double ms_since(std::chrono::steady_clock::time_point t0);
/// For taking an output line apart: drops `prefix` from the front of `s`; false (and `s`
/// unchanged) when `s` does not start with it.
bool take(std::string_view& s, std::string_view prefix);
/// Reads the decimal integer at the front of `s` into `value` and drops it from `s`;
/// false (and `s` unchanged) when there is none or it does not fit an int.
bool take_int(std::string_view& s, int& value);

/// True while `pid` is a live process (exists and is not a zombie).
bool alive(pid_t pid);
/// The resident set of process `pid` now, in KiB (VmRSS); -1 when it cannot be read.
long rss_kib(pid_t pid);
/// Live (non-zombie) processes whose process group is `pgid`.
std::vector<pid_t> processes_in_group(pid_t pgid);
/// Live processes whose environment contains `marker` (a "NAME=value" entry).
std::vector<pid_t> processes_with(const std::string& marker);
/// Processes (zombies included) whose command line contains `text`; `scanned`, when
/// given, gets the number of processes looked at.
std::vector<pid_t> processes_with_cmdline(const std::string& text, int* scanned = nullptr);
/// A fresh "HVDRUN_TEST_MARKER=<pid>-<random>" entry, to pass in a job's environment
/// and find every process of that job with processes_with().
std::string unique_marker();

/// Waits until none of `pids` is alive; false when one still is at the deadline.
bool wait_none_alive(const std::vector<pid_t>& pids, std::chrono::milliseconds within);
/// Waits until processes_with(marker) is empty; false when it is not at the deadline.
bool wait_none_with(const std::string& marker, std::chrono::milliseconds within);

/// The pid written as decimal text into `path` (by `echo $$ > path`), waiting until the
/// file holds a complete line. Throws at the deadline.
pid_t read_pid_file(const std::string& path,
                    std::chrono::milliseconds within = std::chrono::seconds(5));
/// read_pid_file() for dir/<prefix><i>, i in [0, n).
std::vector<pid_t> read_pid_files(const std::string& dir, const std::string& prefix, int n,
                                  std::chrono::milliseconds within = std::chrono::seconds(5));

/// One row of the fault matrix (docs/reliability.md), measured by a fault test.
struct FaultFigure {
  std::string fault;     ///< what was done ("rank SIGSTOPped before the rendezvous")
  std::string outcome;   ///< what hvdrun did ("exit 3 naming rank 1")
  double detect_ms = 0;  ///< fault to hvdrun's verdict (or the figure named in `outcome`)
  int left_running = 0;  ///< processes of the job alive afterwards
  std::string lost;      ///< what output or work was lost ("nothing")
};
/// Prints `f` as one line "fault-matrix: fault | outcome | ms | left | lost" on stdout,
/// for bench/fault_matrix.sh to collect.
void report_fault(const FaultFigure& f);

}  // namespace hvdrun::testing
