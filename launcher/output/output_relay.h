// The launcher's output relay: rank output arrives in arbitrary chunks from the agents and
// leaves as whole lines tagged `[rank]<stdout>:` / `[rank]<stderr>:` on hvdrun's own
// stdout / stderr, a line never split or mixed with another rank's. Lines are tagged into
// one large buffer per stream and written in big blocks: no syscall or allocation per line.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <ctime>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/process/byte_queue.h"
#include "launcher/process/line_tail.h"

namespace hvdrun::launcher {

/// How the relay writes.
struct RelayOptions {
  /// --prefix-output-with-timestamp: `Wed Nov 25 22:45:23 2026[3]<stdout>:text`.
  bool timestamp = false;
  /// --output-filename DIR: also write each rank's raw output to DIR/rank.N/{stdout,stderr}
  /// (N zero-padded to the width of size-1, as horovodrun does). Empty: no files.
  std::string output_dir;
  /// Lines of stderr kept per rank for failure messages.
  std::size_t tail_lines = 10;
  /// --ranks-filter: the ranks (process numbers) whose lines reach stdout_fd/stderr_fd,
  /// ascending; empty: every rank. The others' output still goes to their files and
  /// their stderr tails.
  std::vector<int> console_ranks;
  /// console_ranks applies even when empty (every rank hidden): --local-ranks-filter, or
  /// both filters, named no rank of the job.
  bool console_filtered = false;
  /// Where tagged stdout / stderr lines go.
  int stdout_fd = 1;
  int stderr_fd = 2;
  /// A partial line longer than this is streamed out (its tag first) instead of being held
  /// whole in memory; other ranks' lines on that stream wait until it ends.
  std::size_t long_line_bytes = 1u << 20;
  /// ... but not for ever: once other ranks' output waiting behind a long line exceeds
  /// this many bytes, or has waited `max_hold_ms`, the long line is cut there (a newline
  /// ends the part so far; its rest continues as a new tagged line) and the waiting
  /// output goes out. Memory stays bounded and a rank that never ends its line (a
  /// progress bar redrawn with '\r') cannot hold the other ranks' output back.
  std::size_t max_held_bytes = 4u << 20;
  /// See max_held_bytes.
  int max_hold_ms = 2000;
  /// Buffered bytes that trigger a write.
  std::size_t flush_bytes = 1u << 20;
  /// When the reader of stdout goes away (EPIPE, `hvdrun ... | head`) and no output_dir
  /// keeps the output: end this process by SIGPIPE, as a shell pipeline member does, so
  /// the shell sees 141 and every agent, finding its launcher gone, stops its ranks.
  /// Otherwise (or when false) output to stdout is dropped from then on and the job runs on.
  bool sigpipe_on_broken_stdout = true;
};

/// Tags, buffers and writes the output of `size` ranks.
class OutputRelay {
 public:
  /// Writes rank N's raw output to files[2N] (stdout) and files[2N+1] (stderr), as
  /// open_output_files() returns them; with no files and `output_dir` set, opens them
  /// itself (throws UsageError naming the path).
  OutputRelay(RelayOptions options, int size, std::vector<UniqueFd> files = {});

  /// Takes the next bytes rank `rank` wrote on `stream`. Writes when enough is buffered.
  void add(int rank, proto::Stream stream, std::string_view bytes);

  /// The rank ended: its unterminated last lines are emitted (with a newline added on the
  /// tagged streams; the per-rank files stay byte-exact).
  void end_rank(int rank);
  /// A new process of `rank` started after it ended (in-process elastic recovery): its
  /// output is relayed again.
  void reopen_rank(int rank);
  /// `count` more ranks, numbered from the current size on (processes that join a running
  /// job in process), with their tags and, with `output_dir`, their files (named with the
  /// width the relay started with). Returns what kept their files from opening (their
  /// output is then relayed only), else an empty string.
  std::string add_ranks(int count);

  /// Hands everything buffered to the writer thread, which writes it to stdout/stderr, so
  /// that a slow reader of hvdrun's output (a pager, a terminal) never stalls the
  /// supervision loop. Per-rank files are written here directly.
  void flush();

  /// flush(), then waits until the writer thread has written everything.
  void drain();

  /// Bytes handed to the writer thread and not yet written. The caller stops taking output
  /// while this is large, so that ranks slow down instead of memory growing.
  std::size_t backlog() const;

  /// Writes what is left and stops the writer thread.
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  /// The last lines rank `rank` wrote to stderr, oldest first.
  std::vector<std::string> stderr_tail(int rank) const;

  /// Zero-padded rank directory name, "rank.07" for rank 7 of 12.
  static std::string rank_dir_name(int rank, int size);

 private:
  struct Sink {
    int fd = -1;
    std::atomic<bool> broken{false};  // set by the writer thread (EPIPE: `hvdrun ... | head`)
    ByteQueue buf;
    int owner = -1;              // rank whose long line is being streamed, or -1
    std::size_t held_bytes = 0;  // other ranks' bytes waiting for the owner's line to end
    std::chrono::steady_clock::time_point held_since;  // when held_bytes became non-zero
  };
  struct RankStream {
    std::string tag;    // "[3]<stdout>:"
    ByteQueue partial;  // the current unterminated line
    ByteQueue held;     // bytes that arrived while another rank owned the sink
    UniqueFd file;
    ByteQueue file_buf;
    bool ended = false;  // the rank exited; flush its partial line when the sink is free
  };
  RankStream& state(int rank, proto::Stream s) {
    return per_rank_[static_cast<std::size_t>(rank) * 2 + (s == proto::Stream::err ? 1 : 0)];
  }
  Sink& sink(proto::Stream s) { return s == proto::Stream::err ? err_ : out_; }
  void name_ranks(int first, std::vector<UniqueFd>& files);
  void process(int rank, proto::Stream stream, std::string_view bytes);
  void release_held(proto::Stream stream);
  void cut_long_line(proto::Stream stream);
  void flush_partial(Sink& sk, RankStream& rs);
  void put_prefix(Sink& sk, const RankStream& rs);
  void write_sink(Sink& sk);
  void write_file(RankStream& rs);
  void refresh_timestamp();
  void writer_loop();

  struct Chunk {
    Sink* sink = nullptr;
    ByteQueue bytes;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> chunks_;  // guarded by mu_
  std::size_t backlog_ = 0;   // guarded by mu_
  bool writing_ = false;      // guarded by mu_
  bool stop_ = false;         // guarded by mu_

  RelayOptions opt_;
  int size_;
  int first_size_;  // the size the relay started with: the width of rank directory names
  Sink out_;
  Sink err_;
  std::vector<RankStream> per_rank_;
  std::vector<LineTail> tails_;
  std::time_t stamp_time_ = 0;
  std::string stamp_;
  bool has_files_ = false;  // --output-filename: flush() visits every rank's files
  std::thread writer_;      // last: started once everything above exists
};

}  // namespace hvdrun::launcher
