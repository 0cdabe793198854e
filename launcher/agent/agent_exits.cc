// Rank output and exits (agent_state.h): reading or splicing a rank's pipes into frames,
// reaping the ranks, and reporting their exits in the order they were reaped (the
// launcher's failure message names the rank that failed first).
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/fd.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/agent/agent_state.h"

namespace hvdrun::launcher::agent_detail {

std::size_t Agent::read_rank(Rank& r, proto::Stream stream, std::size_t limit) {
  UniqueFd& fd = stream == proto::Stream::out ? r.out : r.err;
  std::size_t total = 0;
  while (fd && total < limit) {
    std::size_t want = proto::kMaxOutputChunk;
    ByteQueue& q = tail();
    char* p = q.prepare(proto::kOutputHeaderBytes + want);
    ssize_t n = ::read(fd.get(), p + proto::kOutputHeaderBytes, want);
    if (n > 0) {
      if (stream == proto::Stream::err)
        r.tail.add({p + proto::kOutputHeaderBytes, static_cast<std::size_t>(n)});
      if (out_broken_) {  // nobody to send to; keep the pipe flowing
        total += static_cast<std::size_t>(n);
        continue;
      }
      proto::write_output_header(p, r.rank, stream, static_cast<std::uint32_t>(n));
      q.commit(proto::kOutputHeaderBytes + static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < want) return total;  // pipe drained for now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return total;
    fd.reset();  // EOF (or a read error: treat as closed)
  }
  return total;
}

std::size_t Agent::splice_rank(Rank& r) {
  int avail = 0;
  if (::ioctl(r.out.get(), FIONREAD, &avail) != 0 || avail <= 0) {
    return read_rank(r, proto::Stream::out, proto::kMaxOutputChunk);  // EOF or error
  }
  std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(avail), 1u << 20);
  char header[proto::kOutputHeaderBytes];
  proto::write_output_header(header, r.rank, proto::Stream::out, static_cast<std::uint32_t>(n));
  queue_.append(header, sizeof header);
  splice_fd_ = r.out.get();
  splice_rank_ = r.rank;
  splice_left_ = n;
  flush_queue();
  return n;
}

// Exits are first seen without being reaped (WNOWAIT): while a rank is a zombie, its pid,
// which is its process group's id, cannot be given to another process, so the guard is told
// to forget that group before the rank is reaped and the id freed. A guard that learnt it
// after the reap could, if this agent died in between, kill whatever group got the id next.
void Agent::reap() {
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) break;
    const pid_t pid = si.si_pid;
    const auto it = by_pid_.find(pid);
    if (it != by_pid_.end() && guard_) guard_->forget(pid);
    int status = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (got != pid) break;              // not for a zombie child of ours; never spin on it
    if (it == by_pid_.end()) continue;  // adopted, or the guard
    Rank& r = ranks_[it->second];
    // The pid may come back as an adopted orphan's: that one is not this rank.
    by_pid_.erase(it);
    r.reaped = true;
    r.status = status;
    r.exit_order = ++exits_;
  }
  // Stops and continues (these reap nothing).
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WSTOPPED | WCONTINUED | WNOHANG) != 0 || si.si_pid == 0) break;
    const auto it = by_pid_.find(si.si_pid);
    if (it == by_pid_.end()) continue;
    // Stops of our own (a suspend) are the launcher's doing; others it needs to know of.
    if (!suspended_ && !killing_)
      send(proto::RankStopped{it->second, si.si_code == CLD_CONTINUED ? 0 : si.si_status});
  }
}

// In the order the exits were reaped, not by rank: a rank that exits because another one
// did must not be reported first. A rank whose last output is still moving holds back the
// reports of every rank reaped after it.
void Agent::report_exits() {
  std::vector<Rank*> exited;
  for (auto& [n, r] : ranks_) {
    if (r.reaped && !r.reported) exited.push_back(&r);
  }
  std::sort(exited.begin(), exited.end(),
            [](const Rank* a, const Rank* b) { return a->exit_order < b->exit_order; });
  for (Rank* rp : exited) {
    Rank& r = *rp;
    if (splice_left_ && splice_rank_ == r.rank) return;  // its last bytes are still moving
    check_exec_status(r, /*blocking=*/true);
    if (r.reported) continue;  // failed to start: already reported as fatal
    // Whatever the rank wrote before exiting is in its pipes: send it first.
    read_rank(r, proto::Stream::out, kDrainLimit);
    read_rank(r, proto::Stream::err, kDrainLimit);
    r.out.reset();
    r.err.reset();
    proto::RankExited ex;
    ex.rank = r.rank;
    ex.signaled = WIFSIGNALED(r.status);
    ex.value = ex.signaled ? WTERMSIG(r.status) : WEXITSTATUS(r.status);
    ex.stderr_tail = r.tail.lines();
    if (error_dir_ && (ex.signaled || ex.value != 0))
      ex.traceback = read_error_file(error_dir_->path(r.rank));
    send(ex);
    r.reported = true;
    spdlog::debug("rank {} {} {}", r.rank, ex.signaled ? "killed by signal" : "exited with",
                  ex.value);
  }
}
}  // namespace hvdrun::launcher::agent_detail
