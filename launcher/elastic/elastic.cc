#include "launcher/elastic/elastic.h"

#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>

#include "common/deadline.h"
#include "common/error.h"
#include "common/exit_status.h"
#include "common/plural.h"
#include "common/quote.h"
#include "common/seconds_text.h"
#include "hostfile/scheduler.h"
#include "launcher/elastic/discovery.h"
#include "launcher/plan/elastic_hosts.h"
#include "launcher/process/reaper.h"
#include "launcher/start/launch.h"

namespace hvdrun::launcher {

Blacklist::Clock::time_point Blacklist::add(const std::string& host, Clock::time_point now) {
  Entry& e = entries_[host];
  auto cooldown = min_;
  for (int i = 0; i < e.strikes && cooldown < max_; ++i) cooldown *= 2;
  e.strikes += 1;
  e.until = now + std::min(cooldown, max_);
  return e.until;
}

bool Blacklist::excluded(const std::string& host, Clock::time_point now) const {
  auto it = entries_.find(host);
  return it != entries_.end() && now < it->second.until;
}

std::vector<std::pair<std::string, Blacklist::Clock::time_point>> Blacklist::active(
    Clock::time_point now) const {
  std::vector<std::pair<std::string, Clock::time_point>> out;
  for (const auto& [host, e] : entries_) {
    if (now < e.until) out.emplace_back(host, e.until);
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// How often the discovery script runs while a generation is up (HVDRUN_DISCOVERY_INTERVAL).
milliseconds discovery_interval() {
  const char* v = std::getenv("HVDRUN_DISCOVERY_INTERVAL");
  if (v == nullptr || *v == '\0') return seconds(3);
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s >= 0.1 && s <= 3600))
    throw UsageError("bad value " + quote(v) +
                     " for HVDRUN_DISCOVERY_INTERVAL; expected seconds from 0.1 to 3600, as in 3");
  return milliseconds(static_cast<long>(s * 1000));
}

void say(const std::string& line) {
  std::fprintf(stderr, "hvdrun: elastic: %s\n", line.c_str());
  std::fflush(stderr);
}

// "node1 until 14:03:12 (in 10 s)".
std::string until_text(const std::string& host, Clock::time_point until, Clock::time_point now) {
  const auto left = std::chrono::ceil<seconds>(until - now);
  const std::time_t at = std::chrono::system_clock::to_time_t(
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::system_clock::duration>(until - now));
  std::tm tm{};
  ::localtime_r(&at, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return host + " until " + buf + " (in " + std::to_string(left.count()) + " s)";
}

std::string host_list(const std::vector<hostfile::HostSlots>& hosts) {
  std::string s;
  for (std::size_t i = 0; i < hosts.size() && i < 16; ++i)
    s += (i ? ", " : "") + hosts[i].name + ":" + std::to_string(hosts[i].slots);
  if (hosts.size() > 16) s += " and " + std::to_string(hosts.size() - 16) + " more";
  return s;
}

// The whole job's elastic state between generations.
class Elastic {
 public:
  Elastic(const LaunchOptions& options, const GenerationLaunch& launch)
      : opt_(options),
        e_(options.elastic),
        launch_(launch),
        blacklist_(seconds(e_.cooldown_min_s), seconds(e_.cooldown_max_s)),
        kept_(seconds(e_.cooldown_min_s), seconds(e_.cooldown_max_s)),
        interval_(discovery_interval()) {
    if (!e_.discovery_script.empty())
      discovery_.emplace(e_.discovery_script, e_.slots_per_host, seconds(e_.elastic_timeout_s));
  }

  int run();

 private:
  std::vector<hostfile::HostSlots> discover();
  std::vector<hostfile::HostSlots> usable(const std::vector<hostfile::HostSlots>& hosts) const;
  static int slots(const std::vector<hostfile::HostSlots>& hosts);
  int size_for(int available) const;
  bool poll_discovery();
  std::optional<std::string> should_grow(int np);
  std::optional<std::string> scaling_reset();
  std::optional<JobHooks::Reform> reform(const Failure& failure);
  std::string excluded_text() const;
  int too_few(int available) const;
  Clock::time_point exclude(const Failure& failure, bool restarting);

  const LaunchOptions& opt_;
  const ElasticOptions& e_;
  const GenerationLaunch& launch_;
  Blacklist blacklist_;
  // Restart mode without a restart budget: the hosts kept although a rank failed there
  // (the --min-np rule), with the cooldown they would have been excluded for, waited out
  // before the restart instead; cleared by a generation that ran for the longest cooldown.
  Blacklist kept_;
  // Restart mode: the generation stopped to grow although --reset-limit was used up, which
  // ends the job instead (scaling_reset).
  bool limit_reached_ = false;
  milliseconds interval_;
  std::optional<Discovery> discovery_;
  std::vector<hostfile::HostSlots> hosts_;
  Clock::time_point next_discovery_{};
  std::optional<Failure> last_;
  int generation_ = 0;
  int resets_ = 0;
  int np_ = 0;                  // the running generation's size
  bool reform_failed_ = false;  // an in-process re-formation was refused: the job ends
};

// The hosts there are now. A failing script is reported and asked again every interval
// until --elastic-timeout passes; then the job ends.
std::vector<hostfile::HostSlots> Elastic::discover() {
  if (!discovery_) {
    if (!opt_.hosts.empty()) return opt_.hosts;
    // The generations name their hosts themselves, so an allocation's hosts would reach
    // the plan as if given with -H (and --launcher auto would not pick srun): ask for them.
    if (auto a = hostfile::detect_allocation([](const char* n) { return std::getenv(n); }))
      throw UsageError("elastic mode inside a " + a->scheduler + " allocation (" + a->origin +
                       ") needs its hosts named: give -H/--hostfile, or "
                       "--host-discovery-script PATH printing the allocation's nodes");
    return {hostfile::HostSlots{"localhost", opt_.np.value_or(e_.min_np.value_or(1))}};
  }
  // The last try comes at the deadline itself, so "gave up after" is never short of it.
  const auto began = Clock::now();
  const auto give_up = began + seconds(e_.elastic_timeout_s);
  for (;;) {
    DiscoveryResult r = discovery_->run();
    if (!r.error) return std::move(r.hosts);
    const auto now = Clock::now();
    if (now >= give_up)
      throw LaunchError(*r.error + "; gave up after " +
                        seconds_text(std::chrono::duration_cast<milliseconds>(now - began)) +
                        " s of failures (--elastic-timeout " +
                        std::to_string(e_.elastic_timeout_s) + ")");
    const auto wait = std::min(interval_, std::chrono::ceil<milliseconds>(give_up - now));
    say(*r.error + "; asking again in " + std::to_string(wait.count()) + " ms");
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, static_cast<int>(wait.count()));
  }
}

std::vector<hostfile::HostSlots> Elastic::usable(
    const std::vector<hostfile::HostSlots>& hosts) const {
  const auto now = Clock::now();
  return usable_hosts(hosts, [&](const std::string& h) { return blacklist_.excluded(h, now); });
}

int Elastic::slots(const std::vector<hostfile::HostSlots>& hosts) {
  long n = 0;
  for (const auto& h : hosts) n += h.slots;
  return static_cast<int>(std::min<long>(n, 1 << 20));
}

// Every generation takes every usable slot up to --max-np, the first one too, as
// Horovod's driver assigns them: a first generation of -np would grow at the first
// discovery that follows, a reset (or, in restart mode, a restart) seconds into the job.
int Elastic::size_for(int available) const {
  return e_.max_np ? std::min(available, *e_.max_np) : available;
}

std::string Elastic::excluded_text() const {
  const auto now = Clock::now();
  std::string s;
  for (const auto& [host, until] : blacklist_.active(now))
    s += (s.empty() ? "" : ", ") + until_text(host, until, now);
  return s.empty() ? "none" : s;
}

int Elastic::too_few(int available) const {
  say("only " + counted(available, "usable slot") + " left, fewer than --min-np " +
      std::to_string(*e_.min_np) + "; ending the job. Excluded hosts: " + excluded_text());
  return last_ ? last_->exit_code : exit_status::kLaunchFailed;
}

// Excludes the hosts a failure blames. A rank's failure leaves its host in use when
// excluding it would leave fewer than --min-np slots (the job restarts where it was, as
// torchrun does); a host that failed itself is always excluded. Returns when a restart
// may start on the hosts kept (`restarting` with no budget; otherwise at once).
Clock::time_point Elastic::exclude(const Failure& failure, bool restarting) {
  const auto now = Clock::now();
  Clock::time_point restart_at{};
  for (const auto& h : failure.hosts) {
    if (failure.rank_failed) {
      int left = 0;
      for (const auto& u : usable(hosts_)) left += u.name == h ? 0 : u.slots;
      if (left < e_.min_np.value_or(1)) {
        say("host " + h + " stays in use: without it fewer than --min-np " +
            counted(e_.min_np.value_or(1), "slot") + " would be left");
        // With no restart budget, a program that fails at once would restart there for
        // ever at full speed: the restart waits the cooldown instead (a budget restarts
        // at once, as torchrun's --max-restarts does).
        if (restarting && !e_.reset_limit) restart_at = std::max(restart_at, kept_.add(h, now));
        continue;
      }
    }
    blacklist_.add(h, now);
  }
  return restart_at;
}

// Polled by the job loop: runs discovery every interval; true when a run has answered
// since the last call (hosts_ is then its answer).
bool Elastic::poll_discovery() {
  if (!discovery_) return false;
  if (!discovery_->running()) {
    if (Clock::now() < next_discovery_) return false;
    discovery_->start();
    next_discovery_ = Clock::now() + interval_;
  }
  auto r = discovery_->poll();
  if (!r || r->error) return false;
  hosts_ = std::move(r->hosts);
  return true;
}

// Restart mode: when discovery finds more usable slots than the generation has (and
// --max-np allows more), asks the job to stop.
std::optional<std::string> Elastic::should_grow(int np) {
  if (!discovery_ || (e_.max_np && np >= *e_.max_np)) return std::nullopt;
  if (!poll_discovery()) return std::nullopt;
  const int now_there = size_for(slots(usable(hosts_)));
  if (now_there <= np) return std::nullopt;
  if (auto refused = scaling_reset()) {
    limit_reached_ = true;
    return *refused;
  }
  return "elastic: discovery found " + counted(now_there, "usable slot") + " for a job of " +
         counted(np, "rank") + "; stopping generation " + std::to_string(generation_) + " to grow";
}

// A reset that discovery's hosts cause (the job grows, or retires the ranks of hosts that
// left): Horovod's --reset-limit counts it as one of the job's resets ("scale up or down"),
// torchrun's --max-restarts does not. Why the job must end instead, or nullopt.
std::optional<std::string> Elastic::scaling_reset() {
  if (!e_.limit_counts_scaling()) return std::nullopt;
  if (resets_ < *e_.reset_limit) {
    ++resets_;
    return std::nullopt;
  }
  return "elastic: the hosts changed, and the reset limit (--reset-limit " +
         std::to_string(*e_.reset_limit) +
         ", which counts every reset, a change of hosts too, as horovodrun's does) is used up; "
         "ending the job. Give a larger --reset-limit, or --max-restarts to count failures only";
}

// Asked by the job when a generation running in process loses ranks: counts the reset,
// blames the hosts as a restart would, and says which hosts the next generation may use.
std::optional<JobHooks::Reform> Elastic::reform(const Failure& failure) {
  last_ = failure;
  reform_failed_ = true;  // until the job says it re-formed
  if (e_.reset_limit && ++resets_ > *e_.reset_limit) {
    say("the reset limit (" + e_.reset_limit_flag + " " + std::to_string(*e_.reset_limit) +
        ") is used up; ending with the last failure's exit code " +
        std::to_string(failure.exit_code));
    return std::nullopt;
  }
  // Elastic join excludes no node: a lost one is gone (its link closed), and one that comes
  // back is a new pod, taken at once; a rank that failed is replaced on its node.
  if (!opt_.join.elastic()) exclude(failure, false);
  JobHooks::Reform how;
  for (const auto& [host, until] : blacklist_.active(Clock::now())) how.excluded.push_back(host);
  how.max_np = e_.max_np;
  if (opt_.join.elastic()) {
    // Elastic join counts nodes (MIN of --nnodes MIN:MAX), whatever each runs.
    how.min_hosts = opt_.join.min_nodes;
  } else {
    how.min_np = e_.min_np.value_or(1);
  }
  return how;
}

int Elastic::run() {
  const auto job_start = Clock::now();  // --timeout counts over every generation
  hosts_ = discover();
  int& resets = resets_;
  for (;; ++generation_) {
    const auto hosts = usable(hosts_);
    const int available = slots(hosts);
    if (available < e_.min_np.value_or(1)) return too_few(available);
    LaunchOptions g = opt_;
    g.hosts = hosts;
    g.np = size_for(available);
    g.generation = generation_;
    if (generation_ > 0)
      say("generation " + std::to_string(generation_) + " starts with " + counted(*g.np, "rank") +
          " on " + host_list(hosts) + "; excluded: " + excluded_text());
    std::optional<Failure> outcome;
    JobHooks hooks;
    hooks.outcome = &outcome;
    hooks.job_start = job_start;
    np_ = *g.np;
    hooks.should_stop = [this] { return should_grow(np_); };
    hooks.reform = [this](const Failure& f) { return reform(f); };
    hooks.grow = [this]() -> std::optional<std::vector<hostfile::HostSlots>> {
      if (!poll_discovery()) return std::nullopt;
      return usable(hosts_);
    };
    hooks.scale = [this] { return scaling_reset(); };
    hooks.reformed = [this](int generation, int size, int kept, int started,
                            const std::string& why) {
      reform_failed_ = false;
      // Hosts that left (discovery's "no longer lists") end the generation at a commit.
      const char* verb = started > 0 && kept == np_                      ? " grows: "
                         : why.rfind("discovery ", 0) == 0 && kept < np_ ? " ends at a commit: "
                                                                         : " ended: ";
      say("generation " + std::to_string(generation_) + verb + why + "; generation " +
          std::to_string(generation) + " runs in process with " + counted(size, "rank") + " (" +
          std::to_string(kept) + " kept, " + std::to_string(started) +
          " started anew); excluded: " + excluded_text());
      generation_ = generation;
      np_ = size;
    };
    // A discovery run still going when the generation ends is this loop's, not the job's.
    hooks.own_children = [this] {
      return discovery_ && discovery_->running() ? std::vector<pid_t>{discovery_->pid()}
                                                 : std::vector<pid_t>{};
    };
    next_discovery_ = Clock::now() + interval_;
    const auto started = Clock::now();
    const int code = launch_(g, hooks);
    if (!outcome || outcome->interrupted || outcome->final || reform_failed_) return code;
    if (!e_.restarts) return code;  // elastic join: the other nodes ended with the generation
    if (outcome->requested && limit_reached_) return exit_status::kLaunchFailed;
    if (outcome->requested) continue;  // growing costs no restart
    last_ = outcome;
    if (e_.reset_limit && ++resets > *e_.reset_limit) {
      say("the reset limit (" + e_.reset_limit_flag + " " + std::to_string(*e_.reset_limit) +
          ") is used up; ending with the last failure's exit code " + std::to_string(code));
      return code;
    }
    // A generation that ran for the longest cooldown was no crash loop: its hosts start
    // over at the shortest.
    if (Clock::now() - started >= seconds(e_.cooldown_max_s))
      kept_ = Blacklist(seconds(e_.cooldown_min_s), seconds(e_.cooldown_max_s));
    const auto restart_at = exclude(*outcome, true);
    const std::string why = outcome->message.substr(0, outcome->message.find('\n'));
    const auto wait = std::chrono::ceil<seconds>(left_until(restart_at));
    say("generation " + std::to_string(generation_) +
        " ended: " + (why.rfind("hvdrun: ", 0) == 0 ? why.substr(8) : why) + "; restarting" +
        (wait.count() > 0 ? " in " + std::to_string(wait.count()) +
                                " s (a kept host's cooldown, doubling with each failure in a "
                                "row, up to --blacklist-cooldown-range's MAX; give "
                                "--reset-limit to restart at once)"
                          : ""));
    // Nothing of the job runs meanwhile; an interrupt ends hvdrun as between any two
    // generations (a poll cut short by a signal is made again).
    for (int ms; (ms = poll_ms_left(restart_at)) > 0;) {
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, ms);
    }
    if (discovery_) hosts_ = discover();
  }
}

}  // namespace

int run_elastic(const LaunchOptions& options, const GenerationLaunch& launch) {
  Elastic elastic(options, launch);
  return elastic.run();
}

int run_elastic(const LaunchOptions& options) {
  // The discovery script runs in the job's cleanup scope: what it leaves running (a daemon
  // started with setsid, a cache refresher sent to the background) is orphaned when the
  // script ends and comes to this process, not to init, and is killed with the job. During
  // a generation that generation's reaper takes it; before the first one and between
  // generations, this one, which acts once the run below has returned and so after its
  // last discovery run was stopped.
  const LauncherReaper reaper;
  return run_elastic(
      options, [](const LaunchOptions& o, JobHooks hooks) { return launch(o, std::move(hooks)); });
}

}  // namespace hvdrun::launcher
