// The Agent behind run_agent (agent.h), shared by the files that define its parts:
// agent.cc (the protocol loop), agent_spawn.cc (spawning ranks, their process groups and
// cgroup, kill and job control), agent_control.cc (the ranks' control channels and
// in-process regeneration) and agent_exits.cc (rank output, reaping and exit reports).
// Internal to the launcher library.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/control_protocol.h"
#include "common/fd.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/agent/error_file.h"
#include "launcher/process/byte_queue.h"
#include "launcher/process/group_guard.h"
#include "launcher/process/job_cgroup.h"
#include "launcher/process/line_tail.h"
#include "launcher/process/subprocess.h"
#include "launcher/topology/topology.h"

namespace hvdrun::launcher::agent_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Pause reading rank output while this much is waiting for the launcher.
constexpr std::size_t kQueueHighWater = 4u << 20;
// Cap on what is read from one rank pipe after the rank has exited.
constexpr std::size_t kDrainLimit = 16u << 20;
// A read that found less than this in a rank pipe makes the agent leave that pipe alone for
// kCoalesce: a rank streaming output in small writes is then read in large batches (one
// wakeup per batch instead of one per write), while a lone line still goes out at once.
constexpr std::size_t kSmallRead = 64u << 10;
constexpr auto kCoalesce = std::chrono::microseconds(1000);

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  UniqueFd out;
  UniqueFd err;
  UniqueFd exec_status;  // EOF = exec succeeded; bytes = {stage, errno}
  UniqueFd control;      // the agent's end of the rank's control channel, when asked for
  control::Decoder control_in;
  bool reaped = false;
  bool reported = false;
  // Order among this host's exits, as reaped: reports go out in it (the launcher's failure
  // message names the rank that failed first).
  std::uint64_t exit_order = 0;
  int status = 0;
  std::string argv0;
  std::string cwd;
  LineTail tail;
  Clock::time_point defer[2] = {};  // stdout, stderr: not polled before these times
};

class Agent {
 public:
  Agent(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}
  ~Agent() { sweep_groups(); }
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int run();
  /// Last words after an exception: queued frames, then a fatal frame, within 2 s.
  /// Returns whether they reached the launcher.
  bool report_fatal(const std::string& message);
  /// The job's verdict, once the launcher sent one (join mode).
  const std::optional<proto::JobEnd>& job_end() const { return job_end_; }

 private:
  void send(const proto::Message& m) {
    if (!out_broken_) proto::encode(m, tail());
  }
  // Where new frames go: behind a pending splice, if there is one.
  ByteQueue& tail() { return splice_left_ || !later_.empty() ? later_ : queue_; }
  bool pending() const { return !queue_.empty() || splice_left_ || !later_.empty(); }
  bool can_splice() const { return splice_ok_ && !pending() && !out_broken_; }
  std::size_t splice_rank(Rank& r);
  void handle(proto::Message& m);
  void send_hello();
  void spawn(const proto::Spawn& s);
  void read_control(Rank& r);
  void regenerate(const proto::Regenerate& g);
  void read_stdin();
  std::size_t read_rank(Rank& r, proto::Stream stream, std::size_t limit);
  void check_exec_status(Rank& r, bool blocking);
  void reap();
  void report_exits();
  void begin_kill(std::uint32_t grace_ms, const char* why);
  void job_control(bool suspend);
  void forward_signal(int signo);
  // The stack report (agent_stacks.cc): signal the ranks, answer once they wrote or in time.
  void request_stacks(const proto::StacksRequest& req);
  void check_stacks(Clock::time_point now, bool finish);
  void flush_queue();
  bool all_done() const;
  void sweep_groups();
  void ensure_cgroup();
  void ensure_error_dir();
  void remove_cgroup();
  // The steps of run()'s loop.
  void take_signals(SignalMask& signals);
  void check_timers(Clock::time_point now);
  bool finished(Clock::time_point now);
  Clock::time_point collect_pollfds(Clock::time_point now);
  void dispatch();

  int in_;
  int out_;
  proto::Decoder decoder_;
  // Frames to the launcher, in order: queue_, then splice_left_ bytes moved straight from
  // the pipe splice_fd_ (stdout data goes pipe to pipe without being copied through this
  // process), then later_.
  ByteQueue queue_;
  ByteQueue later_;
  int splice_fd_ = -1;
  int splice_rank_ = -1;
  std::size_t splice_left_ = 0;
  bool splice_ok_ = true;
  proto::Hello hello_;
  bool have_hello_ = false;
  bool in_eof_ = false;
  bool out_broken_ = false;
  bool closing_ = false;  // no more spawns; exit once every rank is reported
  bool killing_ = false;
  bool suspended_ = false;  // job control: ranks stopped, no silence limit
  int exit_code_ = 0;
  std::optional<proto::JobEnd> job_end_;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> flush_deadline_;
  Clock::time_point last_rx_ = Clock::now();
  Clock::time_point next_heartbeat_ = Clock::now();
  std::map<int, Rank> ranks_;
  std::map<pid_t, int> by_pid_;
  std::uint64_t exits_ = 0;  // ranks reaped so far (Rank::exit_order)
  UniqueFd dev_null_;
  // Kills the rank groups if this agent is killed; released after sweep_groups().
  std::optional<GroupGuard> guard_;
  // The job's cgroup on this host, made at the first spawn where cgroup v2 allows it.
  // Declared after guard_: on the way out it is emptied while the guard still watches.
  std::optional<JobCgroup> cgroup_;
  bool cgroup_tried_ = false;
  // The ranks' error files (error_file.h), made at the first spawn; none when it cannot be.
  std::optional<ErrorDir> error_dir_;
  bool error_dir_tried_ = false;
  // The stacks request being answered: the ranks signalled and until when they may write.
  struct StacksWait {
    std::uint32_t id = 0;
    Clock::time_point until;
    std::vector<int> waiting;
    proto::Stacks answer;
  };
  std::optional<StacksWait> stacks_;
  // What the next wait polls: a rank's stdout (0), stderr (1) or exec status (2), or
  // without a rank the launcher stream in (0) or out (1).
  struct Slot {
    Rank* rank;
    int what;
  };
  std::vector<pollfd> fds_;
  std::vector<Slot> slots_;
};

// This host's topology, read once (hwloc's load), on the first rank that is to be bound or
// when the launcher's hello asks for it. Throws std::runtime_error when hwloc cannot read it.
const HostTopology& this_host();

}  // namespace hvdrun::launcher::agent_detail
