// Placing ranks (job_state.h): the spawn frames of a host's ranks, and in-process
// re-formation (docs/elastic.md): a generation whose every rank declared the elastic API
// survives a failure by moving its surviving processes to a next generation (a new
// placement, a new rendezvous server, regenerate frames) and starting replacements where
// ranks ended.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/exit_status.h"
#include "common/fd.h"
#include "common/plural.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/job/job_state.h"
#include "launcher/plan/placement_env.h"
#include "launcher/plan/rank_devices.h"
#include "launcher/plan/rank_env.h"
#include "rendezvous/server.h"

namespace hvdrun::launcher::job_detail {

// Host h's spawn frames, once both h's agent (its interface) and the agent of rank 0's host
// (its free port, MASTER_PORT) have said hello.
void Job::send_spawns(Host& h) {
  h.spawned = true;
  const JobEnv env = host_job_env(h);
  for (int w : h.ranks) {
    const RankState& rs = ranks_[static_cast<std::size_t>(w)];
    if (rs.rank >= 0 && !rs.done) spawn_rank(h, w, env);
  }
}

// The job-wide environment as host h's ranks see it.
JobEnv Job::host_job_env(const Host& h) const {
  const Host& first = hosts_[static_cast<std::size_t>(placement_.ranks[0].host_index)];
  JobEnv env = job_env_;
  env.master_port = first.info.free_port;
  if (opt_.network_interface.empty()) env.rendezvous_addr = h.link->launcher_address();
  env.host_interface = h.info.iface;
  // Past the generation this job started with, it has re-formed in process: whoever
  // starts now joins ranks that kept running.
  env.joining = generation_ > opt_.generation;
  // Rank 0's host as this host reaches it.
  env.master_addr = first.local ? (h.local ? "127.0.0.1" : h.link->launcher_address())
                                : first.link->host_address();
  return env;
}

// Process `worker` of host h, at its rank in the current generation.
void Job::spawn_rank(Host& h, int worker, const JobEnv& env) {
  const RankState& rs = ranks_[static_cast<std::size_t>(worker)];
  proto::Spawn s;
  s.rank = worker;
  s.argv = opt_.command;
  s.cwd = ctx_.cwd;
  const hostfile::RankSlot& slot = placement_.ranks[static_cast<std::size_t>(rs.rank)];
  RankEnv re = rank_env(h.env->base, slot, h.name, env, h.env->defaults);
  // The host's hostfile gpus= (or --include's slots), which its agent slices per rank. By
  // name: a generation re-formed or grown in process keeps the placement's ranks, not
  // necessarily its host list in the same order (or at all, for a host new to the job).
  for (const hostfile::HostSlots& ph : placement_.hosts) {
    if (ph.name == h.name && !ph.gpus.empty()) re.set.set(kHostGpusVar, comma_joined(ph.gpus));
  }
  s.host_env = h.env->host_variables;
  s.env = re.set.entries();
  s.env_defaults = re.defaults.entries();
  s.control = static_cast<bool>(hooks_.reform);
  send(h, s);
}

void Job::on_rank_elastic(Host& h, const proto::RankElastic& e) {
  owner_of(h, e.rank, "rank-elastic");
  RankState& declared = ranks_[static_cast<std::size_t>(e.rank)];
  declared.declared = std::max(declared.declared, e.generation);
  if (in_process_) return;
  for (int w : worker_of_) {
    if (ranks_[static_cast<std::size_t>(w)].declared < generation_) return;
  }
  in_process_ = true;
  spdlog::info(
      "every rank of generation {} runs under hvd.elastic.run: a failure keeps the surviving "
      "processes",
      generation_);
}

// A rank shut the current generation down on its own (its collective failed): the failure
// behind it usually reaches this process within moments; if none does, the ranks are
// moved to a next generation as they are.
void Job::on_rank_left(Host& h, const proto::RankLeft& l) {
  owner_of(h, l.rank, "rank-left");
  if (l.generation != generation_ || !in_process_ || stopping() || left_hold_) return;
  left_hold_ = now() + kLeftHold;
}

// The hold after a rank left (on_rank_left) passed with no failure behind it.
void Job::check_left_hold(Clock::time_point t) {
  if (!left_hold_ || t < *left_hold_) return;
  left_hold_.reset();
  if (in_process_ && !stopping() && hooks_.reform && !finished_) {
    // Every rank's collective failed (a mismatch, say) and nothing else did: the same
    // ranks move to a next generation, with no blame and no reset counted.
    JobHooks::Reform same;
    same.min_np = 1;
    reform(
        same,
        Failure{
            exit_status::kOk, "a rank left generation " + std::to_string(generation_) + "\n", {}},
        /*blamed=*/false);
  }
}

// In a generation running in process: re-forms the job around the surviving processes
// instead of stopping them. False when the failure must end the generation.
bool Job::recover(const Failure& f) {
  if (!in_process_ || !hooks_.reform || stopping() || f.interrupted || f.requested) return false;
  if (finished_) {
    spdlog::warn(
        "elastic: a rank had already finished (exit code 0), so the job does not "
        "re-form after this failure");
    return false;
  }
  left_hold_.reset();
  auto how = hooks_.reform(f);
  if (!how) return false;
  return reform(*how, f, /*blamed=*/true);
}

// Moves the job to generation generation_+1 in the same processes: the surviving ranks
// first, in their old order (rank 0 then holds the committed state), then processes
// started anew where ranks ended on hosts still usable. False when fewer than the
// minimum would be left.
bool Job::reform(const JobHooks::Reform& how, const Failure& f, bool blamed) {
  auto excluded = [&](const Host& h) {
    return h.closed ||
           std::find(how.excluded.begin(), how.excluded.end(), h.name) != how.excluded.end();
  };
  std::vector<int> members;
  for (int w : worker_of_) {
    const RankState& rs = ranks_[static_cast<std::size_t>(w)];
    if (!rs.done && !rs.retiring && !rs.late &&
        !excluded(hosts_[static_cast<std::size_t>(rs.host)]))
      members.push_back(w);
  }
  // Rank 0 of the next generation broadcasts the committed state: a survivor that has run
  // under hvd.elastic.run (it synced and committed) comes before one started anew that has
  // not reached it yet (it holds only what the program built).
  std::stable_partition(members.begin(), members.end(),
                        [&](int w) { return ranks_[static_cast<std::size_t>(w)].declared >= 0; });
  const int kept = static_cast<int>(members.size());
  if (how.max_np && kept > *how.max_np) members.resize(static_cast<std::size_t>(*how.max_np));
  std::vector<int> fresh;
  for (const Host& h : hosts_) {
    if (excluded(h) || !h.hello) continue;
    int room = free_listed_slots(h, members);
    for (int w : h.ranks) {
      if (how.max_np && static_cast<int>(members.size()) >= *how.max_np) break;
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (rs.done && rs.started && room > 0) {
        members.push_back(w);
        fresh.push_back(w);
        --room;
      }
    }
  }
  const std::string why = f.message.substr(0, f.message.find('\n'));
  std::string limit;
  if (const std::string left = too_few_left(how, members, limit); !left.empty()) {
    write_all(ctx_.stderr_fd, f.message.data(), f.message.size());
    const std::string msg = "hvdrun: elastic: only " + left + " left for generation " +
                            std::to_string(generation_ + 1) + ", " + limit + "; ending the job\n";
    write_all(ctx_.stderr_fd, msg.data(), msg.size());
    return false;
  }
  if (blamed) write_all(ctx_.stderr_fd, f.message.data(), f.message.size());
  held_.reset();
  ++generation_;
  place_members(members);
  start_generation_server();
  // The survivors hear their places through their agents; every other process of the old
  // generation is stopped by its agent.
  proto::Regenerate g = next_generation(why.rfind("hvdrun: ", 0) == 0 ? why.substr(8) : why);
  g.failure = true;
  g.hosts_removed = members.size() < static_cast<std::size_t>(kept) + fresh.size() || blamed;
  send_regenerate(g);
  start_fresh(fresh, g.reason);
  // Every member leaves the old generation at once (its collectives fail): all must come.
  watch_joins(members);
  return true;
}

// When `members` are too few for a next generation: how many there are ("1 node"), with
// the bound they miss in `limit` ("fewer than the 2 nodes that --nnodes MIN:MAX asks
// for"); empty when they are enough.
std::string Job::too_few_left(const JobHooks::Reform& how, const std::vector<int>& members,
                              std::string& limit) const {
  if (static_cast<int>(members.size()) < how.min_np) {
    limit = "fewer than --min-np " + std::to_string(how.min_np);
    return counted(static_cast<long long>(members.size()), "rank");
  }
  std::vector<int> hosts;
  for (int w : members) hosts.push_back(ranks_[static_cast<std::size_t>(w)].host);
  std::sort(hosts.begin(), hosts.end());
  const auto n = std::unique(hosts.begin(), hosts.end()) - hosts.begin();
  if (n >= how.min_hosts) return {};
  limit = "fewer than the " + std::to_string(how.min_hosts) +
          " nodes that --nnodes MIN:MAX asks for (its MIN)";
  return counted(static_cast<long long>(n), "node");
}

// The slots discovery's latest answer lists on host h beyond the `members` placed there
// (any number before discovery has answered in process): a re-formation starts no process
// on a host discovery dropped, nor more than it lists.
int Job::free_listed_slots(const Host& h, const std::vector<int>& members) const {
  if (!listed_) return std::numeric_limits<int>::max();
  int slots = 0;
  for (const auto& hs : *listed_) {
    if (hs.name == h.name) slots = hs.slots;
  }
  for (int w : members) slots -= ranks_[static_cast<std::size_t>(w)].host == h.index;
  return slots;
}

// The current generation's placement: members[i] (a process) becomes rank i. Local ranks
// count on each host in rank order; a rank's cross rank is its host's index among the
// hosts that have its local rank, in the order the hosts first appear.
void Job::place_members(const std::vector<int>& members) {
  for (RankState& rs : ranks_) rs.rank = -1;
  worker_of_ = members;
  hostfile::Placement p;
  std::vector<int> host_order;
  std::vector<int> count(hosts_.size(), 0);
  for (std::size_t i = 0; i < members.size(); ++i) {
    RankState& rs = ranks_[static_cast<std::size_t>(members[i])];
    rs.rank = static_cast<int>(i);
    hostfile::RankSlot slot;
    slot.rank = static_cast<int>(i);
    slot.host_index = rs.host;
    if (count[static_cast<std::size_t>(rs.host)] == 0) host_order.push_back(rs.host);
    slot.local_rank = count[static_cast<std::size_t>(rs.host)]++;
    p.ranks.push_back(slot);
  }
  for (hostfile::RankSlot& slot : p.ranks) {
    slot.local_size = count[static_cast<std::size_t>(slot.host_index)];
    slot.cross_rank = 0;
    slot.cross_size = 0;
    for (int h : host_order) {
      if (count[static_cast<std::size_t>(h)] <= slot.local_rank) continue;
      if (h == slot.host_index) slot.cross_rank = slot.cross_size;
      ++slot.cross_size;
    }
  }
  for (int h : host_order)
    p.hosts.push_back(hostfile::HostSlots{hosts_[static_cast<std::size_t>(h)].name,
                                          count[static_cast<std::size_t>(h)]});
  placement_ = std::move(p);
  job_env_.size = placement_.size();
  job_env_.generation = generation_;
  job_env_.num_hosts = static_cast<int>(host_order.size());
}

// Generation generation_'s rendezvous server. The secret is the job's, kept by the
// generations that follow in process: the surviving processes authenticate objects with the
// secret they started with (HVDRUN_SECRET in hvdrun.torch).
void Job::start_generation_server() {
  if (job_env_.secret.empty()) job_env_.secret = rendezvous::generate_secret();
  auto& server =
      servers_.emplace_back(std::make_unique<rendezvous::Server>(job_env_.secret, bind_addr_, 0));
  server->start();
  job_env_.rendezvous_port = server->port();
  watch("rendezvous server", server->failure());
  if (hooks_.test.on_rendezvous) hooks_.test.on_rendezvous(*server);
}

// The regenerate frame of the generation just placed (the same for every host, but for the
// rendezvous address and the placements send_regenerate adds).
proto::Regenerate Job::next_generation(std::string reason) const {
  proto::Regenerate g;
  g.generation = generation_;
  g.reason = std::move(reason);
  g.size = placement_.size();
  g.secret = job_env_.secret;
  g.rendezvous_port = static_cast<std::uint16_t>(job_env_.rendezvous_port);
  return g;
}

// To every agent up: the places of its running processes in the new generation, rank -1
// for those that retire (they end at their next commit); the agent stops its other
// processes.
void Job::send_regenerate(const proto::Regenerate& g) {
  for (Host& h : hosts_) {
    if (h.closed || !h.hello) continue;
    proto::Regenerate mine = g;
    mine.rendezvous_addr = host_job_env(h).rendezvous_addr;
    if (mine.rendezvous_addr.empty()) mine.rendezvous_addr = job_env_.rendezvous_addr;
    for (int w : h.ranks) {
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (rs.retiring && !rs.done) mine.ranks.push_back(proto::RankPlacement{w, -1, 0, 0, 0, 0});
      if (rs.rank < 0 || rs.done) continue;
      const hostfile::RankSlot& slot = placement_.ranks[static_cast<std::size_t>(rs.rank)];
      mine.ranks.push_back(proto::RankPlacement{w, slot.rank, slot.local_rank, slot.local_size,
                                                slot.cross_rank, slot.cross_size});
    }
    send(h, mine);
  }
}

// Starts new processes under the numbers `fresh` of processes that ended (now placed in
// the new generation): at once where the host's agent is up, else at its hello.
void Job::start_fresh(const std::vector<int>& fresh, const std::string& why) {
  for (int w : fresh) {
    RankState& rs = ranks_[static_cast<std::size_t>(w)];
    Host& h = hosts_[static_cast<std::size_t>(rs.host)];
    rs.done = false;
    --done_ranks_;
    if (std::exchange(rs.started, false)) {
      --started_ranks_;
      --h.started;
    }
    rs.declared = -1;
    rs.stop_signal = 0;
    rs.retiring = false;
    rs.late = false;
    relay_->reopen_rank(w);
    if (h.hello && !h.closed) spawn_rank(h, w, host_job_env(h));
  }
  if (!fresh.empty()) start_deadline_ = now() + std::chrono::seconds(opt_.start_timeout_s);
  const int kept = placement_.size() - static_cast<int>(fresh.size());
  spdlog::debug("generation {}: {} ({} kept, {} started anew)", generation_,
                counted(placement_.size(), "rank"), kept, fresh.size());
  if (hooks_.reformed)
    hooks_.reformed(generation_, placement_.size(), kept, static_cast<int>(fresh.size()), why);
}

}  // namespace hvdrun::launcher::job_detail

namespace hvdrun::launcher::job_detail {

// `processes` must check in to the generation just placed within the start timeout.
void Job::watch_joins(std::vector<int> processes) {
  join_watch_ = std::move(processes);
  join_deadline_ = now() + std::chrono::seconds(opt_.start_timeout_s);
}

// The join deadline of a re-formation in process: the processes watched that have not
// checked in to the generation's rendezvous (no record under hvdrun/g<G>/info) are left
// out of the next generation (their agents stop them) and their hosts blamed, as for a
// failed rank; the ranks that did come are re-formed without them. Through a host's leader
// (HVDRUN_CHECKIN=host) a host's ranks check in together, so one missing rank there makes
// its whole host late.
void Job::check_join_deadline(Clock::time_point t) {
  if (stopping()) join_watch_.clear();  // nobody is waited for in a teardown
  if (join_watch_.empty() || servers_.empty()) return;
  const rendezvous::Server& server = *servers_.back();
  const std::string prefix = "hvdrun/g" + std::to_string(generation_) + "/";
  if (server.get(prefix + "ready")) {
    join_watch_.clear();
    return;
  }
  if (t < join_deadline_) return;
  std::vector<int> late;
  std::vector<std::string> hosts;
  std::string who;
  for (int w : join_watch_) {
    RankState& rs = ranks_[static_cast<std::size_t>(w)];
    if (rs.done || rs.rank < 0 || server.get(prefix + "info/" + std::to_string(rs.rank))) continue;
    rs.late = true;
    late.push_back(w);
    const std::string& host = hosts_[static_cast<std::size_t>(rs.host)].name;
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    who += (who.empty() ? "" : ", ") + std::string("rank ") + std::to_string(rs.rank) +
           " (process " + std::to_string(w) + " on host " + host + ")";
  }
  join_watch_.clear();
  if (late.empty()) return;
  spdlog::debug("generation {}: {} late", generation_, counted(late.size(), "process"));
  // Blamed as a failed rank: its host stays in use when leaving it out would leave fewer
  // than --min-np slots.
  Failure f{exit_status::kLaunchFailed,
            "hvdrun: " + who + " did not join generation " + std::to_string(generation_) +
                " within --start-timeout (" + std::to_string(opt_.start_timeout_s) +
                " s); left out of the job and stopped\n",
            hosts};
  f.rank_failed = true;
  job_failure(f);
}

}  // namespace hvdrun::launcher::job_detail
