// The ranks' control channels (agent_state.h, HVDRUN_CONTROL_FD): what a rank running
// under the elastic API tells the launcher (it declared the API, it left a generation),
// and the regenerate frame that moves the ranks kept to their places in a next generation
// while the agent stops the others.
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <string_view>

#include "common/control_protocol.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/agent/agent_state.h"

namespace hvdrun::launcher::agent_detail {

// What a rank says on its control channel goes to the launcher; its end (the rank exiting)
// closes the channel; a malformed frame is the rank's error, reported, and the channel
// closed (the rank then sees its generation end).
void Agent::read_control(Rank& r) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(r.control.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      r.control.reset();
      return;
    }
    try {
      r.control_in.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      while (auto m = r.control_in.next()) {
        if (auto* e = std::get_if<control::Elastic>(&*m)) {
          send(proto::RankElastic{r.rank, e->generation});
        } else if (auto* l = std::get_if<control::Left>(&*m)) {
          send(proto::RankLeft{r.rank, l->generation});
        } else {
          throw control::ProtocolError(
              "control channel: the rank sent a message only an agent "
              "sends");
        }
      }
    } catch (const control::ProtocolError& e) {
      spdlog::warn("rank {}: {}; its control channel is closed", r.rank, e.what());
      r.control.reset();
      return;
    }
  }
}

// The job moves on in process: each listed rank hears its place (after the end of its
// generation, for a failure); the host's other ranks are stopped.
void Agent::regenerate(const proto::Regenerate& g) {
  std::map<int, const proto::RankPlacement*> placed;
  for (const auto& p : g.ranks) placed[p.old_rank] = &p;
  for (auto& [n, r] : ranks_) {
    if (r.reaped || r.pid <= 0) continue;
    auto it = placed.find(n);
    if (it == placed.end() || !r.control) {
      ::kill(-r.pid, SIGTERM);
      ::kill(-r.pid, SIGCONT);
      continue;
    }
    const proto::RankPlacement& p = *it->second;
    control::Placement m;
    m.generation = g.generation;
    m.rank = p.rank;
    m.size = g.size;
    m.local_rank = p.local_rank;
    m.local_size = p.local_size;
    m.cross_rank = p.cross_rank;
    m.cross_size = p.cross_size;
    m.rendezvous_addr = g.rendezvous_addr;
    m.rendezvous_port = g.rendezvous_port;
    m.secret = g.secret;
    m.hosts_added = g.hosts_added;
    m.hosts_removed = g.hosts_removed;
    m.failure = g.failure;
    std::string frames;
    if (g.failure) frames = control::encode(control::EndGeneration{g.generation - 1, g.reason});
    frames += control::encode(m);
    // A few hundred bytes into an empty socket buffer: a rank that cannot take them is
    // not reading its channel at all, and is stopped as unplaceable.
    const ssize_t w = ::send(r.control.get(), frames.data(), frames.size(), MSG_NOSIGNAL);
    if (w != static_cast<ssize_t>(frames.size())) {
      spdlog::warn("rank {}: its control channel did not take its placement ({}); stopping it", n,
                   w < 0 ? std::strerror(errno) : "short write");
      ::kill(-r.pid, SIGTERM);
      ::kill(-r.pid, SIGCONT);
    }
  }
}
}  // namespace hvdrun::launcher::agent_detail
