// Following discovery in process (job_state.h, docs/elastic.md): while a generation runs
// in process, the processes on hosts discovery no longer lists retire at their next commit,
// and the job grows onto usable slots: the processes that ended on the job's hosts start
// again (reopening a host whose agent was lost), hosts listing more slots than they had
// processes and hosts new to the job (their agents started with their launch methods) get
// processes numbered after the existing ones; the job moves to a next generation.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/exit_status.h"
#include "common/plural.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/job/job_state.h"
#include "launcher/plan/elastic_hosts.h"
#include "launcher/plan/local_host.h"

namespace hvdrun::launcher::job_detail {

// Asked every turn: in process, whether discovery answered (the job then follows its
// hosts); otherwise whether the caller wants the job stopped (JobHooks::should_stop).
void Job::check_growth_or_stop() {
  if (finished_) return;  // the program is over: neither growth nor a restart to grow
  if (in_process_ && hooks_.grow && hooks_.open_hosts && !stopping()) {
    if (auto hosts = hooks_.grow(); hosts && !follow_hosts(*hosts)) {
      Failure f{exit_status::kOk,
                "hvdrun: elastic: discovery found more usable slots; stopping generation " +
                    std::to_string(generation_) + " to grow\n",
                {}};
      f.requested = true;
      decide(f);
    }
  } else if (hooks_.should_stop && !stopping()) {
    if (auto why = hooks_.should_stop()) {
      Failure f{exit_status::kOk, "hvdrun: " + *why + "\n", {}};
      f.requested = true;
      decide(f);
    }
  }
}

// Discovery answered while the job runs in process (`hosts`, the usable ones): the
// processes on hosts it no longer lists, or lists with fewer slots, retire at their next
// commit (retiring_processes); slots the job does not use get processes: the processes
// that ended on hosts of this job start again (reopening a host whose agent was lost),
// hosts of the job with more slots than processes get new ones, hosts new to the job get
// agents (each started with its launch method) and new processes. The running ranks move to the
// next generation at their next commit (HostsUpdatedInterrupt). False when the growth needs another
// machine while the job's servers listen on loopback only: the job then restarts to grow.
bool Job::follow_hosts(const std::vector<hostfile::HostSlots>& hosts) {
  listed_ = hosts;
  std::string why;
  std::vector<int> leaving = retiring_processes(hosts, why);
  int want = 0;
  for (const auto& hs : hosts) want += hs.slots;
  if (opt_.elastic.max_np) want = std::min(want, *opt_.elastic.max_np);
  if (!leaving.empty() && want < opt_.elastic.min_np.value_or(1)) {
    hold_leaving(why, want);
    return true;
  }
  short_since_.reset();
  want -= placement_.size() - static_cast<int>(leaving.size());
  std::vector<int> fresh;
  if (want > 0 && !grow(hosts, want, fresh)) return false;
  if (leaving.empty() && fresh.empty()) return true;
  if (auto refused = hooks_.scale ? hooks_.scale() : std::nullopt) {
    Failure f{exit_status::kLaunchFailed, "hvdrun: " + *refused + "\n", {}};
    f.final = true;
    decide(f);
    return true;
  }
  for (int w : leaving) ranks_[static_cast<std::size_t>(w)].retiring = true;
  if (!leaving.empty())
    why += leaving.size() > 1 ? ": they leave the job at the next commit"
                              : ": it leaves the job at the next commit";
  std::vector<int> members;
  for (int w : worker_of_) {
    if (!ranks_[static_cast<std::size_t>(w)].retiring) members.push_back(w);
  }
  members.insert(members.end(), fresh.begin(), fresh.end());
  if (!fresh.empty())
    why += (why.empty() ? "" : "; ") +
           (opt_.join.elastic() ? "a node joined with " : std::string("discovery found ")) +
           counted(static_cast<long long>(fresh.size()), "more slot");
  // The ranks move at their next commit; a generation that has not formed yet (ranks
  // still checking in) has none to come, so it ends now instead, as after a failure.
  const bool formed = generation_formed();
  ++generation_;
  place_members(members);
  start_generation_server();
  proto::Regenerate g = next_generation(why);
  g.failure = !formed;
  g.hosts_added = !fresh.empty();
  g.hosts_removed = !leaving.empty();
  send_regenerate(g);
  start_fresh(fresh, g.reason);
  // The running ranks move at their next commit, whenever that is; the new processes
  // must come within the start timeout (and all of them, when the generation ended now).
  watch_joins(formed ? fresh : members);
  return true;
}

// Whether every rank of the current generation has checked in to its rendezvous.
bool Job::generation_formed() const {
  return !servers_.empty() &&
         servers_.back()->get("hvdrun/g" + std::to_string(generation_) + "/ready").has_value();
}

// The running processes that leave the job because their hosts are not in `hosts` (or
// have fewer slots there): the highest ranks of each such host. `why` says which hosts
// and why, naming the processes ("discovery no longer lists node3 (processes 4, 5)").
std::vector<int> Job::retiring_processes(const std::vector<hostfile::HostSlots>& hosts,
                                         std::string& why) const {
  std::vector<hostfile::HostSlots> running;
  for (const Host& h : hosts_) {
    int n = 0;
    for (int w : worker_of_) n += ranks_[static_cast<std::size_t>(w)].host == h.index;
    running.push_back(hostfile::HostSlots{h.name, n});
  }
  std::vector<int> leaving;
  for (const HostShrink& s : host_shrinks(running, hosts)) {
    const Host& h = *std::find_if(hosts_.begin(), hosts_.end(),
                                  [&](const Host& x) { return x.name == s.host; });
    std::vector<int> mine;  // its running processes, by rank
    for (int w : worker_of_) {
      if (ranks_[static_cast<std::size_t>(w)].host == h.index) mine.push_back(w);
    }
    mine.erase(mine.begin(), mine.end() - s.leaving);
    std::string names;
    for (int w : mine) names += (names.empty() ? "" : ", ") + std::to_string(w);
    why += (why.empty() ? "" : "; ") + s.why + " (process" + (mine.size() > 1 ? "es " : " ") +
           names + ")";
    leaving.insert(leaving.end(), mine.begin(), mine.end());
  }
  return leaving;
}

// Processes would retire (`why`) but the usable slots (`usable`) are fewer than --min-np:
// as Horovod's driver waits for enough slots up to --elastic-timeout, they stay in the job
// until discovery lists enough, and the job ends when it has not within --elastic-timeout.
void Job::hold_leaving(const std::string& why, int usable) {
  const int min_np = opt_.elastic.min_np.value_or(1);
  if (!short_since_) {
    short_since_ = now();
    spdlog::warn(
        "elastic: {}, but {} would be fewer than --min-np {}: the ranks stay until discovery "
        "lists enough slots; the job ends if it has not within --elastic-timeout {} s",
        why, counted(usable, "usable slot"), min_np, opt_.elastic.elastic_timeout_s);
    return;
  }
  if (now() - *short_since_ < std::chrono::seconds(opt_.elastic.elastic_timeout_s)) return;
  Failure f{exit_status::kLaunchFailed,
            "hvdrun: elastic: " + why + ", and discovery has listed only " +
                counted(usable, "usable slot") + " for --min-np " + std::to_string(min_np) +
                " for " + std::to_string(opt_.elastic.elastic_timeout_s) +
                " s (--elastic-timeout); ending the job\n",
            {}};
  f.final = true;
  decide(f);
}

// Grows the job by up to `want` processes onto `hosts` (the usable ones), appended to
// `fresh`: processes on hosts of this job first, then hosts new to it. False when the
// growth needs a restart (see add_new_hosts).
bool Job::grow(const std::vector<hostfile::HostSlots>& hosts, int want, std::vector<int>& fresh) {
  std::vector<std::string> to_open;
  fresh = growth_processes(hosts, want, to_open);
  if (static_cast<int>(fresh.size()) < want &&
      !add_new_hosts(hosts, want - static_cast<int>(fresh.size()), fresh))
    return false;
  const std::vector<std::string> failed = reopen_hosts(to_open);
  std::erase_if(fresh, [&](int w) {
    const Host& h = hosts_[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(w)].host)];
    return std::find(failed.begin(), failed.end(), h.name) != failed.end();
  });
  return true;
}

// Up to `want` processes on hosts of this job for `hosts`' slots (within each host's
// listed slots): first the ones that ended there, then processes new to the job where a
// host lists more slots than it ever had processes; in `to_open` the hosts among them
// whose agents are gone.
std::vector<int> Job::growth_processes(const std::vector<hostfile::HostSlots>& hosts, int want,
                                       std::vector<std::string>& to_open) {
  std::vector<int> fresh;
  for (const auto& hs : hosts) {
    auto it = std::find_if(hosts_.begin(), hosts_.end(),
                           [&](const Host& h) { return h.name == hs.name; });
    if (it == hosts_.end()) continue;
    int members = 0;
    for (int w : worker_of_) members += ranks_[static_cast<std::size_t>(w)].host == it->index;
    int room = hs.slots - members;
    const std::size_t before = fresh.size();
    for (int w : it->ranks) {
      if (room <= 0 || static_cast<int>(fresh.size()) >= want) break;
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (!rs.done || rs.rank >= 0) continue;
      fresh.push_back(w);
      --room;
    }
    const int more = std::min(room, want - static_cast<int>(fresh.size()));
    if (more > 0) {
      const std::vector<int> added = add_processes(*it, more);
      fresh.insert(fresh.end(), added.begin(), added.end());
    }
    if (fresh.size() > before && it->closed) to_open.push_back(it->name);
  }
  return fresh;
}

// Hosts of `hosts` that this job never had, for up to `want` more processes: false, with
// nothing changed, when one of them is another machine and the job's servers listen on
// loopback only (every host of its launch was this machine): the job restarts to grow.
// Otherwise each one that starts joins the job with its agent and its processes (numbered
// after the existing ones), appended to `fresh`; one that does not takes no rank now
// (discovery offers it again).
bool Job::add_new_hosts(const std::vector<hostfile::HostSlots>& hosts, int want,
                        std::vector<int>& fresh) {
  std::vector<hostfile::HostSlots> added;
  int slots = 0;
  for (const auto& hs : hosts) {
    if (slots >= want) break;
    if (std::any_of(hosts_.begin(), hosts_.end(), [&](const Host& h) { return h.name == hs.name; }))
      continue;
    added.push_back(hostfile::HostSlots{hs.name, std::min(hs.slots, want - slots)});
    slots += added.back().slots;
  }
  if (added.empty()) return true;
  std::vector<std::string> names;
  for (const auto& hs : added) names.push_back(hs.name);
  if (plan_.all_local() && !std::all_of(names.begin(), names.end(),
                                        [](const std::string& n) { return is_local_host(n); }))
    return false;
  for (auto& o : hooks_.open_hosts(names)) {
    auto it = std::find_if(added.begin(), added.end(),
                           [&](const hostfile::HostSlots& hs) { return hs.name == o.host; });
    if (it == added.end()) continue;
    if (!o.link && !o.local) {
      spdlog::warn("host {}: {}; it takes no rank now", o.host, o.error);
      continue;
    }
    const std::vector<int> mine = add_host(std::move(o), it->slots);
    fresh.insert(fresh.end(), mine.begin(), mine.end());
  }
  return true;
}

// A host new to the job (`opened`: its agent's link, or this machine, whose agent starts
// now), with `processes` processes new to the job, which it returns.
std::vector<int> Job::add_host(JobHooks::OpenedHost opened, int processes) {
  Host h;
  h.index = static_cast<int>(hosts_.size());
  h.name = std::move(opened.host);
  h.local = opened.local;
  h.method = opened.method;
  h.env = &host_env(env_source_of(h.local, h.method));
  h.link = h.local ? open_link(h) : std::move(opened.link);
  h.last_rx = now();
  if (const std::string a = h.link->host_address(); !h.local && horovod_ && ip_literal(a))
    horovod_->allow_also({a});
  spdlog::debug("host {}: new to the job, {}", h.name, h.link->describe());
  hosts_.push_back(std::move(h));
  std::vector<int> added = add_processes(hosts_.back(), processes);
  send_hello(hosts_.back());
  return added;
}

// `count` processes new to the job on `h`, numbered after the existing ones and ended
// (start_fresh starts them): the output relay grows by their numbers.
std::vector<int> Job::add_processes(Host& h, int count) {
  std::vector<int> added;
  if (count <= 0) return added;
  for (int i = 0; i < count; ++i) {
    RankState rs;
    rs.host = h.index;
    rs.done = true;
    added.push_back(workers());
    h.ranks.push_back(workers());
    ranks_.push_back(rs);
    ++done_ranks_;
  }
  if (const std::string error = relay_->add_ranks(count); !error.empty())
    spdlog::warn("host {}: the output of its ranks goes to hvdrun's output only: {}", h.name,
                 error);
  spdlog::debug("host {}: processes {}..{} new to the job", h.name, added.front(), added.back());
  return added;
}

// New agents for the hosts whose agents were lost (the preflight blocks this loop for the
// length of an SSH login; the running ranks go on meanwhile). Returns the hosts that
// could not be reached.
std::vector<std::string> Job::reopen_hosts(const std::vector<std::string>& names) {
  std::vector<std::string> failed;
  if (names.empty()) return failed;
  for (auto& opened : hooks_.open_hosts(names)) {
    auto it = std::find_if(hosts_.begin(), hosts_.end(),
                           [&](const Host& x) { return x.name == opened.host; });
    if (it == hosts_.end()) continue;
    Host& h = *it;
    if (!opened.link && !h.local) {
      spdlog::warn("host {}: {}; it takes no rank now", h.name, opened.error);
      failed.push_back(h.name);
      continue;
    }
    h.link = h.local ? open_link(h) : std::move(opened.link);
    h.closed = false;
    h.hello = false;
    h.spawned = false;
    h.decoder = proto::Decoder();
    h.outq.clear();
    h.read_chunk = Host::kMinReadChunk;
    h.last_rx = now();
    send_hello(h);
  }
  return failed;
}

}  // namespace hvdrun::launcher::job_detail
