// In-process growth (job_state.h, docs/elastic.md): discovery found more usable slots
// while a generation runs in process; the processes that ended on the job's hosts start
// again (reopening a host whose agent was lost) and the job moves to a next generation.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/exit_status.h"
#include "common/plural.h"
#include "launcher/agent_protocol.h"
#include "launcher/job_state.h"

namespace hvdrun::launcher::job_detail {

// Asked every turn: in process, whether discovery found more slots to grow onto;
// otherwise whether the caller wants the job stopped (JobHooks::should_stop).
void Job::check_growth_or_stop() {
  if (in_process_ && hooks_.grow && hooks_.open_hosts && !stopping()) {
    if (auto hosts = hooks_.grow(placement_.size()); hosts && !grow(*hosts)) {
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

// Discovery found more usable slots (`hosts`, the usable ones) while the job runs in
// process: the processes that ended on hosts of this job start again there (a host whose
// agent was lost gets a new one, after a preflight), and the running ranks move to the
// next generation at their next commit (HostsUpdatedInterrupt). False when the growth
// needs slots of hosts this job never had, or more than their processes: the job then
// restarts to grow.
bool Job::grow(const std::vector<hostfile::HostSlots>& hosts) {
  int want = 0;
  for (const auto& hs : hosts) want += hs.slots;
  if (opt_.elastic.max_np) want = std::min(want, *opt_.elastic.max_np);
  want -= placement_.size();
  if (want <= 0) return true;
  std::vector<std::string> to_open;
  std::vector<int> fresh = growth_processes(hosts, want, to_open);
  if (static_cast<int>(fresh.size()) < want) return false;
  const std::vector<std::string> failed = reopen_hosts(to_open);
  std::erase_if(fresh, [&](int w) {
    const Host& h = hosts_[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(w)].host)];
    return std::find(failed.begin(), failed.end(), h.name) != failed.end();
  });
  if (fresh.empty()) return true;
  std::vector<int> members = worker_of_;
  members.insert(members.end(), fresh.begin(), fresh.end());
  ++generation_;
  place_members(members);
  start_generation_server();
  proto::Regenerate g = next_generation("discovery found " +
                                        counted(static_cast<long long>(fresh.size()), "more slot"));
  g.hosts_added = true;
  send_regenerate(g);
  start_fresh(fresh, g.reason);
  return true;
}

// Up to `want` processes of this job that ended on `hosts` (within each host's slots), and
// in `to_open` the hosts among them whose agents are gone.
std::vector<int> Job::growth_processes(const std::vector<hostfile::HostSlots>& hosts, int want,
                                       std::vector<std::string>& to_open) const {
  std::vector<int> fresh;
  for (const auto& hs : hosts) {
    auto it = std::find_if(hosts_.begin(), hosts_.end(),
                           [&](const Host& h) { return h.name == hs.name; });
    if (it == hosts_.end()) continue;
    int members = 0;
    for (int w : worker_of_) members += ranks_[static_cast<std::size_t>(w)].host == it->index;
    int room = std::min(hs.slots, static_cast<int>(it->ranks.size())) - members;
    const std::size_t before = fresh.size();
    for (int w : it->ranks) {
      if (room <= 0 || static_cast<int>(fresh.size()) >= want) break;
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (!rs.done || rs.rank >= 0) continue;
      fresh.push_back(w);
      --room;
    }
    if (fresh.size() > before && it->closed) to_open.push_back(it->name);
  }
  return fresh;
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
    if (!opened.link) {
      spdlog::warn("host {}: {}; it takes no rank now", h.name, opened.error);
      failed.push_back(h.name);
      continue;
    }
    h.link = std::move(opened.link);
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
