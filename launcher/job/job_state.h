// The Job behind run_job (job.h), shared by the files that define its parts: job.cc (the
// steps and the supervision loop, the agents' events), job_failure.cc (failures, the
// interrupt, teardown), job_reform.cc (placing ranks, in-process re-formation) and
// job_grow.cc (in-process growth). Internal to the launcher library.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/thread_failure.h"
#include "compat/horovod_http_server.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/hosts/agent_link.h"
#include "launcher/job/job.h"
#include "launcher/job/job_context.h"
#include "launcher/job/stack_report.h"
#include "launcher/job/stacks_socket.h"
#include "launcher/output/output_relay.h"
#include "launcher/plan/launch_options.h"
#include "launcher/plan/launch_plan.h"
#include "launcher/plan/rank_env.h"
#include "launcher/process/byte_queue.h"
#include "rendezvous/server.h"

namespace hvdrun::launcher::job_detail {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Whether `a` is an IPv4 or IPv6 address literal (what the Horovod rendezvous can admit).
bool ip_literal(const std::string& a);

// Where the ranks of a host start their environment from: the launcher's for this machine,
// else its launch method's (rank_env.h).
EnvSource env_source_of(bool local, LaunchMethod method);

// The ranks whose output reaches the console: --ranks-filter's, narrowed to those whose local
// rank --local-ranks-filter names (job_report.cc).
std::vector<int> console_ranks(const LaunchOptions& o, const hostfile::Placement& placement);

// What the ranks of one kind of host (EnvSource) get besides the per-rank contract.
struct HostEnv {
  EnvList base;                             // the launcher's forwarded part and -x
  std::vector<std::string> host_variables;  // of the agent's own, the ones ranks start from
  EnvList defaults;                         // where nothing else sets them
  bool ready = false;                       // the fields above are made (Job::host_env)
};

struct Host {
  int index = 0;
  std::string name;
  bool local = true;
  LaunchMethod method = LaunchMethod::local;
  std::unique_ptr<AgentLink> link;
  proto::Decoder decoder;
  ByteQueue outq;
  bool hello = false;
  bool spawned = false;  // its spawn frames are queued (or it will never get any)
  bool closed = false;   // no more frames will come
  std::vector<int> ranks;
  int started = 0;
  Clock::time_point last_rx;
  proto::AgentHello info;
  const HostEnv* env = nullptr;  // Job::host_envs_: one per EnvSource, not per host
  // Bytes asked of the link per read: small for a quiet host (the launcher holds one buffer
  // per host), doubled while reads fill it, up to kMaxReadChunk.
  std::size_t read_chunk = kMinReadChunk;
  static constexpr std::size_t kMinReadChunk = 4u << 10;
  static constexpr std::size_t kMaxReadChunk = 1u << 20;
};

// One process the agents run for the job, by the number its agent knows it by (its rank in
// the generation it was started in). In process, a process keeps its number while its rank
// changes with the generations; a replacement reuses the number of a process that ended on
// the same host.
struct RankState {
  int host = 0;
  int rank = -1;      // its rank in the current generation; -1: not in it (being stopped)
  int declared = -1;  // the newest generation it declared the elastic API in
  bool started = false;
  bool done = false;
  int stop_signal = 0;  // stopped by this signal (not by a suspend), or 0
  // Left the job because discovery no longer lists its host: it ends at its next commit
  // (its agent gave it no place, rank -1), not stopped and not blamed.
  bool retiring = false;
  // Did not check in to the generation it was placed in by the join deadline: left out of
  // the next one (its agent stops it) and blamed.
  bool late = false;
  Clock::time_point stopped_at;
  // How it ended, for --result-file (job_report.cc): wall-clock times, its exit as its agent
  // reported it (exited false: no report, the rank never started or its host was lost),
  // why, and the traceback of its error file.
  std::chrono::system_clock::time_point started_wall;
  std::chrono::system_clock::time_point ended_wall;
  bool exited = false;
  bool signaled = false;
  int value = 0;
  const char* cause = nullptr;  // set once: "exited", "failed", "stopped", "lost", ...
  std::string traceback;
};

class Job {
 public:
  Job(const LaunchPlan& plan, const LaunchOptions& opt, const JobHooks& hooks, JobContext& ctx)
      : opt_(opt), hooks_(hooks), ctx_(ctx), plan_(plan), placement_(plan.placement) {}

  int run();
  /// The failure that decided the job (the first one), if any.
  const std::optional<Failure>& outcome() const { return outcome_; }

 private:
  // The steps of run(), in order.
  void check_command() const;
  void lay_out_hosts();
  const HostEnv& host_env(EnvSource source);
  std::string prepare_job_env();
  void prepare_output_dirs();
  void start_agents();
  void start_relay();
  void start_servers(const std::string& bind_addr);
  void supervise();
  int finish();

  // One turn of the supervision loop; false when the job is over.
  bool turn();
  bool handle_interrupt();
  void suspend();
  void forward_signal(int sig);
  void flush_links(Clock::time_point deadline);
  void check_frozen();
  std::string stopped_ranks_text();
  bool teardown_overdue(Clock::time_point t);
  void wait_for_events(Clock::time_point t);

  std::unique_ptr<AgentLink> open_link(const Host& h);
  void send(Host& h, const proto::Message& m);
  void send_spawns(Host& h);
  void service(Host& h, bool read = true);
  void handle(Host& h, proto::Message& m);
  void on_agent_hello(Host& h, const proto::AgentHello& hello);
  void admit_interface(const Host& h, const std::vector<std::string>& addrs);
  bool place_host(const Host& h);
  bool every_host_placed() const;
  void on_rank_started(Host& h, const proto::RankStarted& st);
  void on_rank_exited(Host& h, const proto::RankExited& ex);
  Failure rank_failure(const Host& h, const proto::RankExited& ex, int others);
  void decide_held_failure();
  void on_fatal(Host& h, const proto::Fatal& f);
  bool repeats_outcome(const Host& h, const std::string& message) const;
  void on_rank_stopped(Host& h, const proto::RankStopped& stop);
  Host* owner_of(Host& h, int rank, const char* what);
  void rank_done(int rank);
  // In-process elastic recovery (docs/elastic.md).
  void on_rank_elastic(Host& h, const proto::RankElastic& e);
  void on_rank_left(Host& h, const proto::RankLeft& l);
  void job_failure(const Failure& f);
  bool recover(const Failure& f);
  bool reform(const JobHooks::Reform& how, const Failure& f, bool blamed);
  void place_members(const std::vector<int>& members);
  void start_generation_server();
  void spawn_rank(Host& h, int worker, const JobEnv& env);
  JobEnv host_job_env(const Host& h) const;
  bool follow_hosts(const std::vector<hostfile::HostSlots>& hosts);
  bool generation_formed() const;
  int free_listed_slots(const Host& h, const std::vector<int>& members) const;
  std::string too_few_left(const JobHooks::Reform& how, const std::vector<int>& members,
                           std::string& limit) const;
  std::vector<int> retiring_processes(const std::vector<hostfile::HostSlots>& hosts,
                                      std::string& why) const;
  void hold_leaving(const std::string& why, int usable);
  bool grow(const std::vector<hostfile::HostSlots>& hosts, int want, std::vector<int>& fresh);
  std::vector<int> growth_processes(const std::vector<hostfile::HostSlots>& hosts, int want,
                                    std::vector<std::string>& to_open);
  std::vector<std::string> reopen_hosts(const std::vector<std::string>& names);
  bool add_new_hosts(const std::vector<hostfile::HostSlots>& hosts, int want,
                     std::vector<int>& fresh);
  std::vector<int> add_host(JobHooks::OpenedHost opened, int processes);
  std::vector<int> add_processes(Host& h, int count);
  proto::Regenerate next_generation(std::string reason) const;
  void send_regenerate(const proto::Regenerate& g);
  void start_fresh(const std::vector<int>& fresh, const std::string& why);
  void send_hello(Host& h);
  void host_closed(Host& h, const std::string& why);
  void fail(int exit_code, std::string message, std::vector<std::string> hosts = {});
  void decide(const Failure& f);
  void begin_teardown();
  bool stopping() const { return teardown_deadline_.has_value(); }
  void check_timers(Clock::time_point t);
  void check_left_hold(Clock::time_point t);
  void check_growth_or_stop();
  void check_start_deadline(Clock::time_point t);
  void check_timeout(Clock::time_point t);
  // The stack report (job_stacks.cc, docs/diagnosis.md#the-stack-report): before a
  // --timeout teardown (true once printed; until then the teardown waits) and on SIGQUIT.
  bool report_stacks_before_teardown();
  void request_stacks(const std::string& why, bool for_timeout);
  void on_stacks(Host& h, const proto::Stacks& s);
  void check_stacks(Clock::time_point t);
  bool stall_ended(const Host& h, const proto::RankExited& ex,
                   const std::vector<std::string>& tail);
  void open_stacks_socket();
  void accept_stacks_clients();
  void note_exit(int rank, const proto::RankExited& ex);
  void write_result_file();
  void tell_joined_nodes();
  void watch_joins(std::vector<int> processes);
  void check_join_deadline(Clock::time_point t);
  void watch(std::string what, const ThreadFailure& failure);
  void check_servers();
  int running_ranks() const;
  int workers() const { return static_cast<int>(ranks_.size()); }
  bool all_done() const { return done_ranks_ == workers(); }
  Clock::time_point now() const { return ctx_.clock->now(); }
  // hvdrun's own stdout/stderr cannot keep up: stop reading agents (ranks then block on
  // their pipes) until it drains.
  bool output_backed_up() const { return relay_->backlog() > kMaxOutputBacklog; }
  static constexpr std::size_t kMaxOutputBacklog = 16u << 20;

  const LaunchOptions& opt_;
  const JobHooks& hooks_;
  JobContext& ctx_;
  const LaunchPlan& plan_;
  hostfile::Placement placement_;  // the current generation's, indexed by rank
  std::vector<int> worker_of_;     // the process (ranks_ index) of each current rank
  std::vector<Host> hosts_;
  HostEnv host_envs_[4];  // by EnvSource
  std::vector<RankState> ranks_;
  std::vector<UniqueFd> output_files_;  // --output-filename, opened before anything starts
  std::optional<OutputRelay> relay_;
  JobEnv job_env_;
  Clock::time_point start_time_;
  Clock::time_point start_deadline_;
  Clock::time_point next_heartbeat_;
  Clock::time_point last_heartbeat_;  // when the agents last heard from this process
  std::optional<Clock::time_point> teardown_deadline_;
  std::optional<Clock::time_point> timeout_deadline_;  // --timeout
  // A stack report being gathered: the hosts still to answer, until when, what came.
  struct StacksGather {
    std::uint32_t id = 0;
    std::string why;
    bool for_timeout = false;
    Clock::time_point until;
    std::vector<int> hosts;  // indexes into hosts_ not yet answered
    std::vector<RankStackAnswer> got;
  };
  std::optional<StacksGather> stacks_;
  std::uint32_t stacks_requests_ = 0;
  bool timeout_stacks_done_ = false;  // the report before the --timeout teardown is out
  // `hvdrun stacks` (stacks_socket.h): where it connects, and who waits for the report.
  std::optional<StacksSocket> stacks_socket_;
  // A rank that ended itself past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS: its failure, decided
  // once the report of where the others are is out.
  std::optional<Failure> stall_failure_;
  std::vector<UniqueFd> stacks_clients_;
  static constexpr milliseconds kStacksWait{3000};      // what each agent waits for its ranks
  std::chrono::system_clock::time_point started_wall_;  // the job's start, for --result-file
  // A rank that failed because a peer was lost (its stderr says so): not yet the job's
  // failure, while the rank that failed first may still report (see on_rank_exited).
  struct HeldFailure {
    int host;
    proto::RankExited exit;
    Clock::time_point until;
  };
  std::optional<HeldFailure> held_;
  // horovodrun's and mpirun's rule: the first failure the job does not survive stops it and
  // decides its exit code; later ones (the other ranks dying in the teardown) change nothing.
  // In process, elastic re-formation (recover) comes before it.
  std::optional<Failure> outcome_;
  // When the outcome is a rank that could not start ("cannot start rank N: <reason>"):
  // its host and reason, so the same report from the host's other ranks is said once.
  std::string start_failure_host_;
  std::string start_failure_reason_;
  bool interrupted_ = false;
  int generation_ = 0;
  bool in_process_ = false;  // every rank declared the elastic API: failures re-form
  // A rank of the current generation exited 0: the program has finished, so the job neither
  // grows nor re-forms any more (either would start the program again in processes whose
  // training is over); it ends when the others end.
  bool finished_ = false;
  // A rank left the current generation with no failure known to this process: a re-form
  // at the same size once this passes, unless the failure behind it arrives first.
  std::optional<Clock::time_point> left_hold_;
  static constexpr milliseconds kLeftHold{500};
  // Since when processes would have retired (their hosts left) but fewer than --min-np
  // usable slots were listed (Job::hold_leaving).
  std::optional<Clock::time_point> short_since_;
  // After a re-formation in process: the processes that must check in to the new
  // generation's rendezvous by join_deadline_ (--start-timeout), or be left out and blamed.
  std::vector<int> join_watch_;
  Clock::time_point join_deadline_;
  // Discovery's latest usable hosts while the job runs in process (follow_hosts): a
  // re-formation starts processes anew only where they list free slots.
  std::optional<std::vector<hostfile::HostSlots>> listed_;
  int started_ranks_ = 0;
  int done_ranks_ = 0;
  // The servers' I/O threads: an error there ends the job with its cause.
  struct Watched {
    std::string what;
    const ThreadFailure* failure;
    bool reported;
  };
  std::vector<Watched> watched_;
  std::vector<pollfd> fds_;
  std::vector<int> fd_host_;  // fds_[i] belongs to hosts_[fd_host_[i]], or -1
  std::string bind_addr_;
  std::string outward_;  // this machine as the other hosts reach it
  // Declared last, so destroyed first: the servers stop before the links end the agents.
  // One rendezvous server per generation (the current one last).
  std::vector<std::unique_ptr<rendezvous::Server>> servers_;
  std::optional<compat::HorovodHttpServer> horovod_;
};

}  // namespace hvdrun::launcher::job_detail
