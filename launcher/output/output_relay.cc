// OutputRelay: line tagging with memchr over whole chunks; one growing buffer per stream.
#include "launcher/output/output_relay.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/exit_status.h"
#include "launcher/output/output_files.h"

namespace hvdrun::launcher {
namespace {

// Ends the process the way a write to a closed pipe does by default. The launcher
// ignores SIGPIPE (so that EPIPE reaches the code that can act on it); this restores the
// default and raises it in the calling thread.
[[noreturn]] void die_of_sigpipe() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);
  ::raise(SIGPIPE);
  ::_exit(exit_status::for_signal(SIGPIPE));  // not reached
}

}  // namespace

std::string OutputRelay::rank_dir_name(int rank, int size) {
  int width = 1;
  for (int v = size - 1; v >= 10; v /= 10) ++width;
  std::string digits = std::to_string(rank);
  if (static_cast<int>(digits.size()) < width) digits.insert(0, width - digits.size(), '0');
  return "rank." + digits;
}

OutputRelay::OutputRelay(RelayOptions options, int size, std::vector<UniqueFd> files)
    : opt_(std::move(options)),
      size_(size),
      first_size_(size),
      per_rank_(static_cast<std::size_t>(size) * 2) {
  out_.fd = opt_.stdout_fd;
  err_.fd = opt_.stderr_fd;
  tails_.assign(static_cast<std::size_t>(size), LineTail(opt_.tail_lines));
  if (!opt_.output_dir.empty() && files.empty())
    files = open_output_files(opt_.output_dir, size, &OutputRelay::rank_dir_name);
  has_files_ = !files.empty();
  name_ranks(0, files);
  writer_ = std::thread([this] { writer_loop(); });
}

// Tags ranks first..size_-1 and gives them `files` (2 per rank, from rank `first` on; none
// when empty).
void OutputRelay::name_ranks(int first, std::vector<UniqueFd>& files) {
  for (int r = first; r < size_; ++r) {
    for (auto s : {proto::Stream::out, proto::Stream::err}) {
      RankStream& rs = state(r, s);
      rs.tag =
          "[" + std::to_string(r) + "]<" + (s == proto::Stream::out ? "stdout" : "stderr") + ">:";
      const auto at =
          static_cast<std::size_t>(&rs - per_rank_.data()) - static_cast<std::size_t>(first) * 2;
      if (at < files.size()) rs.file = std::move(files[at]);
    }
  }
}

std::string OutputRelay::add_ranks(int count) {
  if (count <= 0) return {};
  std::vector<UniqueFd> files;
  std::string error;
  if (!opt_.output_dir.empty()) {
    try {
      files = open_output_files(opt_.output_dir, size_ + count, &OutputRelay::rank_dir_name, size_,
                                first_size_);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const int first = size_;
  size_ += count;
  per_rank_.resize(static_cast<std::size_t>(size_) * 2);
  tails_.resize(static_cast<std::size_t>(size_), LineTail(opt_.tail_lines));
  name_ranks(first, files);
  has_files_ = has_files_ || !files.empty();
  return error;
}

OutputRelay::~OutputRelay() {
  flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

void OutputRelay::writer_loop() {
  // Signals are for the supervision loop (it waits for them in ppoll), never this thread.
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    Chunk c;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !chunks_.empty(); });
      if (chunks_.empty()) return;
      c = std::move(chunks_.front());
      chunks_.pop_front();
      writing_ = true;
    }
    if (!c.sink->broken && !write_all(c.sink->fd, c.bytes.data(), c.bytes.size())) {
      int err = errno;
      c.sink->broken = true;  // stop writing there
      if (err == EPIPE && c.sink == &out_ && opt_.sigpipe_on_broken_stdout &&
          opt_.output_dir.empty()) {
        die_of_sigpipe();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      backlog_ -= c.bytes.size();
      writing_ = false;
    }
    cv_.notify_all();
  }
}

void OutputRelay::refresh_timestamp() {
  std::time_t now = std::time(nullptr);
  if (now == stamp_time_ && !stamp_.empty()) return;
  stamp_time_ = now;
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%a %b %d %H:%M:%S %Y", &tm);
  stamp_.assign(buf, n);
}

void OutputRelay::put_prefix(Sink& sk, const RankStream& rs) {
  if (opt_.timestamp) sk.buf.append(stamp_);
  sk.buf.append(rs.tag);
}

void OutputRelay::add(int rank, proto::Stream stream, std::string_view bytes) {
  if (rank < 0 || rank >= size_ || bytes.empty()) return;
  if (opt_.timestamp) refresh_timestamp();
  RankStream& rs = state(rank, stream);
  if (rs.file) {
    rs.file_buf.append(bytes);
    if (rs.file_buf.size() >= opt_.flush_bytes / 4) write_file(rs);
  }
  if (stream == proto::Stream::err) tails_[static_cast<std::size_t>(rank)].add(bytes);
  if ((opt_.console_filtered || !opt_.console_ranks.empty()) &&
      !std::binary_search(opt_.console_ranks.begin(), opt_.console_ranks.end(), rank))
    return;  // --ranks-filter: kept in its files and tail only
  process(rank, stream, bytes);
  Sink& sk = sink(stream);
  if (sk.buf.size() >= opt_.flush_bytes) write_sink(sk);
}

void OutputRelay::process(int rank, proto::Stream stream, std::string_view b) {
  Sink& sk = sink(stream);
  RankStream& rs = state(rank, stream);
  while (!b.empty()) {
    if (sk.owner == rank) {
      // Streaming this rank's long line: pass bytes through up to its end.
      const void* nl = std::memchr(b.data(), '\n', b.size());
      if (!nl) {
        sk.buf.append(b);
        if (sk.buf.size() >= opt_.flush_bytes) write_sink(sk);
        return;
      }
      std::size_t n = static_cast<std::size_t>(static_cast<const char*>(nl) - b.data()) + 1;
      sk.buf.append(b.substr(0, n));
      b.remove_prefix(n);
      sk.owner = -1;
      release_held(stream);
      continue;
    }
    if (sk.owner != -1) {
      if (sk.held_bytes == 0) sk.held_since = std::chrono::steady_clock::now();
      rs.held.append(b);
      sk.held_bytes += b.size();
      if (sk.held_bytes > opt_.max_held_bytes) cut_long_line(stream);
      return;
    }
    if (!rs.partial.empty()) {
      const void* nl = std::memchr(b.data(), '\n', b.size());
      if (!nl) {
        rs.partial.append(b);
        if (rs.partial.size() > opt_.long_line_bytes) {
          put_prefix(sk, rs);
          sk.buf.append(rs.partial.view());
          rs.partial.clear();
          sk.owner = rank;
        }
        return;
      }
      std::size_t n = static_cast<std::size_t>(static_cast<const char*>(nl) - b.data()) + 1;
      put_prefix(sk, rs);
      sk.buf.append(rs.partial.view());
      sk.buf.append(b.substr(0, n));
      rs.partial.clear();
      b.remove_prefix(n);
      continue;
    }
    // The common case: tag every complete line of the chunk in one pass.
    const char* p = b.data();
    const char* end = b.data() + b.size();
    const std::size_t tag = rs.tag.size() + (opt_.timestamp ? stamp_.size() : 0);
    while (p < end) {
      const char* nl =
          static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
      if (!nl) break;
      std::size_t len = static_cast<std::size_t>(nl - p) + 1;
      char* dst = sk.buf.prepare(tag + len);
      if (opt_.timestamp) {
        std::memcpy(dst, stamp_.data(), stamp_.size());
        dst += stamp_.size();
      }
      dst = std::copy(rs.tag.begin(), rs.tag.end(), dst);  // mid-buffer: no terminator
      std::memcpy(dst, p, len);
      sk.buf.commit(tag + len);
      p = nl + 1;
    }
    b.remove_prefix(static_cast<std::size_t>(p - b.data()));
    if (!b.empty()) {
      rs.partial.append(b);
      if (rs.partial.size() > opt_.long_line_bytes) {
        put_prefix(sk, rs);
        sk.buf.append(rs.partial.view());
        rs.partial.clear();
        sk.owner = rank;
      }
    }
    return;
  }
}

void OutputRelay::release_held(proto::Stream stream) {
  Sink& sk = sink(stream);
  for (int r = 0; r < size_ && sk.owner == -1; ++r) {
    RankStream& rs = state(r, stream);
    if (!rs.held.empty()) {
      ByteQueue held = std::move(rs.held);
      rs.held = ByteQueue();
      sk.held_bytes -= held.size();
      process(r, stream, held.view());
    }
    if (rs.ended && sk.owner == r) {
      sk.buf.append("\n", 1);  // its held rest became a long line; it has ended
      sk.owner = -1;
    }
    if (rs.ended && sk.owner == -1) flush_partial(sk, rs);
  }
  if (sk.held_bytes > 0) sk.held_since = std::chrono::steady_clock::now();
}

void OutputRelay::cut_long_line(proto::Stream stream) {
  Sink& sk = sink(stream);
  if (sk.owner == -1) return;
  sk.buf.append("\n", 1);  // the owner's next bytes start a new tagged line
  sk.owner = -1;
  release_held(stream);
}

void OutputRelay::flush_partial(Sink& sk, RankStream& rs) {
  if (rs.partial.empty()) return;
  put_prefix(sk, rs);
  sk.buf.append(rs.partial.view());
  sk.buf.append("\n", 1);
  rs.partial.clear();
}

void OutputRelay::end_rank(int rank) {
  if (rank < 0 || rank >= size_) return;
  for (auto s : {proto::Stream::out, proto::Stream::err}) {
    Sink& sk = sink(s);
    RankStream& rs = state(rank, s);
    if (sk.owner == rank) {
      sk.buf.append("\n", 1);
      sk.owner = -1;
      release_held(s);
    }
    // While another rank's long line is open, this rank's rest waits behind it and is
    // emitted by release_held() when that line ends.
    rs.ended = true;
    if (sk.owner == -1) flush_partial(sk, rs);
    if (rs.file) write_file(rs);
  }
}

void OutputRelay::reopen_rank(int rank) {
  if (rank < 0 || rank >= size_) return;
  for (auto s : {proto::Stream::out, proto::Stream::err}) state(rank, s).ended = false;
}

void OutputRelay::write_file(RankStream& rs) {
  if (rs.file && !rs.file_buf.empty()) {
    if (!write_all(rs.file.get(), rs.file_buf.data(), rs.file_buf.size())) rs.file.reset();
  }
  rs.file_buf.clear();
}

void OutputRelay::write_sink(Sink& sk) {
  if (sk.buf.empty()) return;
  if (sk.broken) {
    sk.buf.clear();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    backlog_ += sk.buf.size();
    chunks_.push_back(Chunk{&sk, std::move(sk.buf)});
  }
  cv_.notify_all();
}

void OutputRelay::drain() {
  flush();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return chunks_.empty() && !writing_; });
}

std::size_t OutputRelay::backlog() const {
  std::lock_guard<std::mutex> lock(mu_);
  return backlog_;
}

void OutputRelay::flush() {
  for (auto s : {proto::Stream::out, proto::Stream::err}) {
    Sink& sk = sink(s);
    if (sk.owner != -1 && sk.held_bytes > 0 &&
        std::chrono::steady_clock::now() - sk.held_since >
            std::chrono::milliseconds(opt_.max_hold_ms)) {
      cut_long_line(s);
    }
  }
  write_sink(out_);
  write_sink(err_);
  // Only with --output-filename: a pass over every rank on every flush would cost a job of
  // N ranks N^2 steps.
  if (has_files_) {
    for (auto& rs : per_rank_) write_file(rs);
  }
}

std::vector<std::string> OutputRelay::stderr_tail(int rank) const {
  if (rank < 0 || rank >= size_) return {};
  return tails_[static_cast<std::size_t>(rank)].lines();
}

}  // namespace hvdrun::launcher
