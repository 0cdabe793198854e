// The timeline: a file, in Chrome's trace event format (a JSON array that chrome://tracing
// and Perfetto open), of what each collective went through on this rank and when, as
// Horovod's HOROVOD_TIMELINE writes it: one row ("process") per collective name, its
// phases as nested begin/end events (NEGOTIATE_ALLREDUCE, then ALLREDUCE holding the
// data movement's own phases), when each rank was seen ready during the negotiation, and
// global markers (CYCLE_START). Timestamps are microseconds since start().
//
// Callers (the engine, on any thread) record events; a writer thread formats and appends
// them, so no caller waits on the disk. After every batch the file ends with "]": a rank
// that dies mid-run leaves a file that still parses. While stopped, every recording call
// costs one relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/fd.h"

namespace hvdrun::runtime {

/// Writes one rank's timeline file; every member is safe to call from any thread.
class Timeline {
 public:
  /// At most this many events wait for the writer; beyond it events are dropped (and
  /// counted, and the file says so) rather than making a collective wait on the disk.
  static constexpr std::size_t kMaxQueued = std::size_t{1} << 20;
  /// Rows (collective names) remembered by default. Past it, the rows with no phase open
  /// are forgotten (a name seen again gets a new row), so that a program naming every
  /// collective afresh cannot grow this rank's memory without bound.
  static constexpr std::size_t kMaxRows = std::size_t{1} << 16;

  /// A stopped timeline remembering at most `max_rows` rows, with at most `max_queued`
  /// events waiting for the writer.
  explicit Timeline(std::size_t max_rows = kMaxRows, std::size_t max_queued = kMaxQueued)
      : max_rows_(max_rows), max_queued_(max_queued) {}
  /// stop().
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// Starts writing to `path` (created 0600, or truncated), which holds a valid JSON array
  /// from then on. The file is opened by common/safe_path.h's rules: a link, FIFO,
  /// directory or another user's file at `path`, or a directory on the way another user
  /// could change, is refused (UnsafePath, naming it), never followed, waited on or
  /// truncated. A timeline already writing is stopped first (its file completed). With
  /// `mark_cycles`, cycle() writes CYCLE_START markers. Throws UnsafePath or SystemError
  /// naming the path when the file cannot be opened or written; the timeline then stays
  /// stopped.
  void start(const std::string& path, bool mark_cycles = false);
  /// Writes every event recorded so far, completes the file and closes it; later events
  /// are ignored until start(). Idempotent.
  void stop();
  /// Returns once every event recorded before the call is in the file (or dropped).
  void flush();

  /// True while writing. Recording calls check it themselves; test it only to skip
  /// building their arguments.
  bool enabled() const noexcept { return enabled_.load(std::memory_order_relaxed); }
  /// Whether cycle() writes markers (start()'s `mark_cycles`).
  bool marks_cycles() const noexcept { return mark_cycles_.load(std::memory_order_relaxed); }
  /// The file being written; "" while stopped.
  std::string path() const;
  /// Events dropped since start() because the writer fell `max_queued` behind.
  std::uint64_t dropped() const;
  /// Why writing stopped on its own ("" when it did not): the file could not be written.
  std::string error() const;

  /// Opens phase `phase` (a "B" event) on the row of the collective `name`; phases of
  /// one name nest: the data movement's phases (QUEUE, MEMCPY_IN_FUSION_BUFFER,
  /// GLOO_ALLREDUCE, ...) inside the operation's (ALLREDUCE).
  void begin(std::string_view name, std::string_view phase) {
    if (enabled()) record(What::kBegin, name, phase, {}, {});
  }
  /// Closes the innermost open phase of `name` (an "E" event); nothing when none is open.
  void end(std::string_view name) {
    if (enabled()) record(What::kEnd, name, {}, {}, {});
  }
  /// Closes every phase of `name` still open, innermost first; the last "E" carries the
  /// result's `dtype` and `shape` as arguments when given (Horovod writes them there).
  void end_all(std::string_view name, std::string_view dtype = {}, std::string_view shape = {}) {
    if (enabled()) record(What::kEndAll, name, {}, dtype, shape);
  }
  /// Opens the negotiation phase of `name`: NEGOTIATE_<kind>, e.g. NEGOTIATE_ALLREDUCE.
  void negotiate_begin(std::string_view name, std::string_view kind) {
    if (enabled()) record(What::kNegotiate, name, kind, {}, {});
  }
  /// Marks, inside the negotiation of `name`, the moment `rank` was seen ready (an
  /// instant "X" event named by the rank's number).
  void rank_ready(std::string_view name, int rank) {
    if (enabled()) record_rank(name, rank);
  }
  /// Closes the negotiation phase of `name` (as end()).
  void negotiate_end(std::string_view name) { end(name); }
  /// A global instant marker named `marker` (an "i" event across every row).
  void mark(std::string_view marker) {
    if (enabled()) record(What::kMarker, {}, marker, {}, {});
  }
  /// A CYCLE_START marker, when start() was given `mark_cycles`: the engine calls it at
  /// the start of each round.
  void cycle() {
    if (marks_cycles()) mark("CYCLE_START");
  }

 private:
  enum class What { kBegin, kNegotiate, kEnd, kEndAll, kMarker };
  // One event as recorded; the writer turns it into JSON. ph: 'B', 'E', 'X', 'i', or 'M'
  // for a new row's metadata (text: the collective's name).
  struct Event {
    char ph = 0;
    int pid = 0;
    std::int64_t ts = 0;
    std::string text;  // the phase, rank, marker or row name
    std::string dtype;
    std::string shape;
  };
  struct Row {
    int pid = 0;
    int open = 0;  // phases begun and not yet ended
  };

  void record(What what, std::string_view name, std::string_view text, std::string_view dtype,
              std::string_view shape);
  void record_rank(std::string_view name, int rank);
  // The row of `name`, made (with its metadata event) on first use. mu_ held.
  Row& row(std::string_view name, std::int64_t ts);
  void push(Event event);  // mu_ held
  std::int64_t now() const;
  void writer();
  // Appends `text` and the closing bracket at the end of the events. Throws SystemError.
  void append(const std::string& text);
  void stop_writer();

  std::atomic<bool> enabled_{false};
  std::atomic<bool> mark_cycles_{false};
  std::mutex control_;  // serialises start() and stop()
  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // events queued, or stopping
  std::condition_variable written_cv_;  // a batch written
  bool writing_ = false;                // between start() and stop(), while healthy
  bool stopping_ = false;
  std::vector<Event> queue_;
  std::uint64_t queued_ = 0;   // events ever queued since start()
  std::uint64_t written_ = 0;  // of those, written (or given up on)
  std::uint64_t dropped_ = 0;
  std::uint64_t dropped_reported_ = 0;
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const noexcept {
      return std::hash<std::string_view>{}(name);
    }
  };
  std::unordered_map<std::string, Row, NameHash, std::equal_to<>> rows_;
  int next_pid_ = 1;
  std::size_t max_rows_;
  std::size_t max_queued_;
  std::string path_;
  std::string error_;
  std::chrono::steady_clock::time_point start_;
  // The writer's side (start() and stop() touch them only while no writer runs): the
  // file, its path for messages, and where the events end (the closing bracket starts
  // there).
  UniqueFd fd_;
  std::string file_;
  std::int64_t end_ = 0;
  std::thread thread_;
};

/// Begins a phase of a collective and ends it when the scope closes, on every path out (the
/// data movement's phases: `TimelineScope s(timeline, name, "GLOO_ALLREDUCE");`).
class TimelineScope {
 public:
  /// Begins `phase` on the row `name` when `timeline` is writing.
  TimelineScope(Timeline& timeline, std::string_view name, std::string_view phase)
      : timeline_(timeline), active_(timeline.enabled()) {
    if (active_) {
      name_ = name;
      timeline_.begin(name_, phase);
    }
  }
  /// Ends the phase (nothing when the timeline was stopped at the start).
  ~TimelineScope() {
    if (active_) timeline_.end(name_);
  }
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  Timeline& timeline_;
  bool active_;
  std::string name_;
};

/// The collective whose data moves on this thread now: the engine names it around a
/// collective's body while the timeline writes (TimelineRow), so that the transports mark
/// their own phases inside it (TimelineActivity: SHM_ALLREDUCE, GLOO_ALLREDUCE,
/// NCCL_ALLREDUCE, ...) without being told which collective they serve.
struct TimelineCurrent {
  Timeline* timeline = nullptr;
  std::string_view row;
};

/// This thread's current collective; null when none, or when the timeline is stopped.
inline thread_local const TimelineCurrent* timeline_current = nullptr;
/// TimelineRows naming a collective now, on any thread: while there are none, a
/// TimelineActivity knows its thread has no current collective without reading the
/// thread-local (a call into the dynamic linker in a shared library).
inline std::atomic<int> timeline_rows{0};

/// Names `row` of `timeline` as this thread's current collective for the scope, when the
/// timeline is writing (`timeline` may be null: nothing).
class TimelineRow {
 public:
  TimelineRow(Timeline* timeline, std::string_view row) : previous_(timeline_current) {
    if (timeline != nullptr && timeline->enabled()) {
      here_ = {timeline, row};
      timeline_rows.fetch_add(1, std::memory_order_relaxed);
      timeline_current = &here_;
    }
  }
  ~TimelineRow() {
    timeline_current = previous_;
    if (here_.timeline != nullptr) timeline_rows.fetch_sub(1, std::memory_order_relaxed);
  }
  TimelineRow(const TimelineRow&) = delete;
  TimelineRow& operator=(const TimelineRow&) = delete;

 private:
  const TimelineCurrent* previous_;
  TimelineCurrent here_;
};

/// A phase of the data movement (`phase`: a string literal) on this thread's current
/// collective, from construction to the end of the scope. While no thread has a current
/// collective (the timeline stopped) it costs one atomic load.
class TimelineActivity {
 public:
  explicit TimelineActivity(const char* phase)
      : current_(timeline_rows.load(std::memory_order_relaxed) > 0 ? timeline_current : nullptr) {
    if (current_ != nullptr) current_->timeline->begin(current_->row, phase);
  }
  ~TimelineActivity() {
    if (current_ != nullptr) current_->timeline->end(current_->row);
  }
  TimelineActivity(const TimelineActivity&) = delete;
  TimelineActivity& operator=(const TimelineActivity&) = delete;

 private:
  const TimelineCurrent* current_;
};

/// `text` as the inside of a JSON string: quotes, backslashes and control characters
/// escaped; bytes that are not UTF-8 are written as the code points of the same value.
std::string json_escape(std::string_view text);

}  // namespace hvdrun::runtime
