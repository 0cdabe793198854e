// Fakes for the job loop's unit tests: a scripted agent behind the AgentLink interface (it
// answers frames in memory, no process) and a clock that jumps to the next deadline
// instead of sleeping, so that timeouts of seconds are tested in microseconds.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/hosts/agent_link.h"
#include "launcher/job/job_context.h"
#include "launcher/process/byte_queue.h"

namespace hvdrun::testing {

/// What a scripted agent does.
struct FakeAgentScript {
  /// Answers the launcher's hello (and its heartbeats).
  bool answers = true;
  /// Reports every rank as started.
  bool starts = true;
  /// Exit code of a rank, reported right after it starts; a rank not listed runs until the
  /// launcher asks for a kill (then it is reported killed by SIGTERM).
  std::map<int, int> exit_codes;
  /// What a rank that fails "wrote to stderr" (its tail in the exit report).
  std::vector<std::string> stderr_tail;
  /// The same for one rank, in place of stderr_tail.
  std::map<int, std::vector<std::string>> rank_stderr_tail;
  /// Ranks of exit_codes whose exit is reported only after the agent has received this
  /// many heartbeats (time passes between them), not right after the start.
  std::map<int, int> exit_after_heartbeats;
  /// Written to stdout by every rank when it starts.
  std::string output;
  /// Every rank declares the elastic API once started (in-process recovery); on a
  /// regenerate frame a rank placed at -1 (retired) exits 0 at once, as at its commit,
  /// and a running rank left out is killed by SIGTERM, as the agent does.
  bool elastic = false;
  /// With `elastic`: the agent's connection ends on a regenerate frame that retires
  /// ranks (the host went away with its ranks), instead of their exits.
  bool gone_on_retire = false;
};

/// What the launcher asked of one fake agent.
struct FakeAgentRecord {
  std::vector<launcher::proto::Spawn> spawns;
  int kills = 0;
  int heartbeats = 0;
  std::vector<launcher::proto::Regenerate> regenerates;
  /// read() calls that found nothing to read.
  int idle_reads = 0;
  bool closed = false;
  bool aborted = false;
};

/// A scripted agent reached through the AgentLink interface.
class FakeAgentLink : public launcher::AgentLink {
 public:
  FakeAgentLink(FakeAgentScript script, std::shared_ptr<FakeAgentRecord> record);

  void add_pollfds(std::vector<pollfd>& fds, bool want_read, bool want_write) const override;
  launcher::IoResult read(char* buf, std::size_t size) override;
  launcher::IoResult write(const char* buf, std::size_t size) override;
  void close_write() override { record_->closed = true; }
  void abort() override;
  std::string close(std::chrono::steady_clock::time_point deadline) override;
  std::string describe() const override { return "fake agent"; }
  std::string launcher_address() const override { return "127.0.0.1"; }
  std::string host_address() const override { return "127.0.0.1"; }

 private:
  void on_frame(const launcher::proto::Message& m);
  void exit_rank(int rank, bool signaled, int value);

  FakeAgentScript script_;
  std::shared_ptr<FakeAgentRecord> record_;
  launcher::proto::Decoder decoder_;
  launcher::ByteQueue to_launcher_;
  std::map<int, bool> running_;
  int heartbeats_ = 0;
  bool eof_ = false;
  UniqueFd ready_;  // an eventfd that is always readable
};

/// A JobClock whose time moves only when the job waits with nothing ready: it then jumps
/// to the wait's deadline.
class FakeJobClock : public launcher::JobClock {
 public:
  Clock::time_point now() override { return now_; }
  int wait(std::vector<pollfd>& fds, Clock::time_point until) override;
  int take_interrupt() override;
  /// Delivers `sig` as an interrupt after the job's `waits`-th wait.
  void interrupt_after(int waits, int sig) {
    interrupt_wait_ = waits;
    interrupt_sig_ = sig;
  }
  /// Fake time passed since the start.
  std::chrono::milliseconds elapsed() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now_ - start_);
  }

 private:
  Clock::time_point start_ = Clock::time_point{} + std::chrono::hours(1);
  Clock::time_point now_ = start_;
  int waits_ = 0;
  int interrupt_wait_ = -1;
  int interrupt_sig_ = 0;
  int pending_ = 0;
};

}  // namespace hvdrun::testing
