// The public C++ API (hvdrun/hvdrun.h): one process-wide World and the Engine that runs
// every collective once the ranks agree on it (runtime/engine/negotiation.h), blocking or
// asynchronous. init() after shutdown() joins again under a fresh key prefix. This file
// joins and leaves the job; its collectives are api_collectives.cc, its process sets
// api_process_sets.cc.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/control_protocol.h"
#include "common/fd.h"
#include "common/log.h"
#include "hvdrun/hvdrun.h"
#include "hvdrun/hvdrun_c.h"
#include "runtime/api/api_state.h"
#include "runtime/core/control_link.h"
#include "runtime/core/generation_end.h"
#include "runtime/core/timeline.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/negotiation.h"
#include "runtime/nccl/device_watchdog.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace hvdrun {

using api_detail::Joined;
using api_detail::joined;
using api_detail::stall_policy;
using api_detail::timeline;

Error::~Error() = default;
InvalidArgument::~InvalidArgument() = default;

namespace {

std::mutex g_mu;  // guards g_joined (the pointer), never held during a collective
// Deliberately never destroyed at exit: leaving the job needs the network and logging,
// which static destruction may already have torn down. shutdown() releases it.
std::shared_ptr<Joined>& g_joined = *new std::shared_ptr<Joined>;
// g_joined as collectives read it, without g_mu: written with it, under g_mu
// (publish_joined()), so a collective's entry takes no lock.
std::atomic<std::shared_ptr<Joined>>& g_live = *new std::atomic<std::shared_ptr<Joined>>;
void publish_joined() { g_live.store(g_joined, std::memory_order_release); }  // g_mu held

// Leaving: every process set's engine stops (what is still queued fails) and its
// communicators close; with `farewell`, the set's host leaders first pass a last barrier
// so none closes a connection another still reads.
void close_sets(Joined& j, bool farewell) {
  std::map<int, std::shared_ptr<runtime::ProcessSet>> sets;
  {
    std::lock_guard lock(j.sets_mu);
    sets.swap(j.sets);
  }
  for (auto& [id, set] : sets) {
    if (!set->engine) continue;
    set->engine->stop();
    try {
      if (farewell) set->host->farewell(std::chrono::seconds(10));
    } catch (const std::exception& e) {
      hvdrun::log().warn("hvdrun: leaving process set {}: {}", id, e.what());
    }
  }
}

// A job whose engine shut down because another rank did (one rank's shutdown shuts every
// rank down, as in Horovod) is retired here as shutdown() would: this process is then
// not initialised, and init() joins afresh. g_mu held.
void retire_if_closed() {
  if (!g_joined || !g_joined->engine->closed()) return;
  auto j = std::move(g_joined);
  publish_joined();
  close_sets(*j, true);
  j->engine->stop();
  j->world->leave(true);
}

}  // namespace

std::shared_ptr<Joined> api_detail::joined_if_any() {
  return g_live.load(std::memory_order_acquire);
}

std::shared_ptr<Joined> api_detail::joined(const char* fn) {
  // The common case: a joined job whose engine has not shut down.
  if (auto j = g_live.load(std::memory_order_acquire); j && !j->engine->closed()) return j;
  std::lock_guard lock(g_mu);
  retire_if_closed();
  if (!g_joined)
    throw Error(std::string("hvdrun::") + fn +
                "() called before hvdrun::init() (or after hvdrun::shutdown())");
  return g_joined;
}

std::size_t dtype_size(DataType dtype) {
  const std::size_t bytes = runtime::element_bytes(dtype);
  if (bytes == 0)
    throw Error("hvdrun: unknown data type " + std::to_string(static_cast<int>(dtype)));
  return bytes;
}

namespace {

// init() calls so far in this process in generation g_incarnation_generation (guarded by
// g_mu): a process joining its generation again checks in under a prefix of its own; one
// moved to a next generation (in-process elastic recovery) checks in as its first time
// there, as the ranks started for that generation do.
int g_incarnation = 0;
int g_incarnation_generation = -1;

// The control channel from this rank's agent (HVDRUN_CONTROL_FD; in-process elastic
// recovery, docs/elastic.md), opened by the first init() that finds the variable; never
// closed, as its reader must hear the agent between a shutdown() and the next init().
// Guarded by g_mu, as is the placement this process last moved to.
runtime::ControlLink* g_control = nullptr;
std::optional<control::Placement> g_placement;
// The newest generation this process left after a failed collective (guarded by g_mu):
// under a control channel it is over for this process, which waits for its next place.
int g_failed_generation = -1;
// Set once a joining process (HVDRUN_JOINING) has shut down its job of one: every later
// init() joins the job (guarded by g_mu).
bool g_left_alone = false;

// The control channel from this rank's agent, opened by the first init() that has one.
// g_mu held.
void open_control(const runtime::Environment& env) {
  if (env.control_fd < 0 || g_control != nullptr) return;
  g_control = new runtime::ControlLink(UniqueFd(env.control_fd));
  g_control->keep_for_process();
}

// The environment of the generation this init() joins: the process's own, unless the
// agent has moved the rank (the generation ended, or hosts were added): then the
// placement the agent sent, waited for up to the start timeout. g_mu held.
runtime::Environment place(runtime::Environment env) {
  open_control(env);
  if (g_control == nullptr) return env;
  if (g_placement) env = runtime::placed(std::move(env), *g_placement);
  // Until the generation to join is one the agent has not ended already (a survivor may
  // have died while the job re-formed).
  for (;;) {
    const int current = env.generation;
    const bool over = (runtime::generation_end().ended() &&
                       runtime::generation_end().ended_generation() >= current) ||
                      g_failed_generation >= current;
    if (!over && !g_control->placement_pending(current)) return env;
    g_control->left(current);
    auto next =
        g_control->wait_placement(current, std::chrono::steady_clock::now() + env.start_timeout);
    if (!next)
      throw Error("hvdrun::init(): generation " + std::to_string(current) +
                  " ended and this host's agent gave rank " + std::to_string(env.rank) +
                  " no place in the next one within the start timeout (" +
                  std::to_string(env.start_timeout.count() / 1000) +
                  " s, HVDRUN_START_TIMEOUT): the job has ended or left this rank out; exit "
                  "the process");
    if (next->rank < 0)
      throw Error("hvdrun::init(): rank " + std::to_string(env.rank) +
                  " has no place in generation " + std::to_string(next->generation) +
                  ": its host left the job (discovery no longer lists it); end the process "
                  "with status 0");
    g_placement = *next;
    env = runtime::placed(std::move(env), *next);
  }
}

// The world of the generation this rank is placed in (place()). When that generation ends
// while the rank checks in (the launcher re-formed the job around a rank that did not
// come), the rank takes the placement after it, until a generation forms. g_mu held.
std::unique_ptr<runtime::World> join(const runtime::Environment& process_env) {
  for (;;) {
    auto env = place(process_env);
    if (env.generation != g_incarnation_generation) {
      g_incarnation_generation = env.generation;
      g_incarnation = 0;
    }
    env.incarnation = g_incarnation;
    // A new generation starts unended (runtime/core/generation_end.h), unless the agent has
    // already ended the one being joined (or the agent is gone): its first collective
    // then fails, and the next init() takes the placement after it.
    if (runtime::generation_end().ended_generation() < env.generation)
      runtime::generation_end().rearm();
    const int generation = env.generation;
    try {
      auto world = std::make_unique<runtime::World>(std::move(env));
      ++g_incarnation;
      return world;
    } catch (const std::exception& e) {
      if (g_control == nullptr || !runtime::generation_end().ended() ||
          runtime::generation_end().ended_generation() < generation)
        throw;
      hvdrun::log().info(
          "hvdrun: generation {} ended while this rank joined it ({}); joining "
          "the next",
          generation, e.what());
      g_failed_generation = std::max(g_failed_generation, generation);
    }
  }
}

}  // namespace

runtime::Timeline& api_detail::timeline() {
  static auto* t = new runtime::Timeline();
  return *t;
}

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0;
}

// A timeline that cannot be opened safely or written is a warning, and the job goes on
// without it (as Horovod's writer does): a file another user prepared must cost the job
// nothing but its timeline. `source` names where the path came from.
void start_timeline_or_warn(const std::string& path, bool mark_cycles, const char* source) {
  try {
    timeline().start(path, mark_cycles);
  } catch (const std::exception& e) {
    hvdrun::log().warn(
        "hvdrun: no timeline is written ({}): {}; give a file in a directory of your own "
        "(docs/security.md)",
        source, e.what());
  }
}

}  // namespace

runtime::StallPolicy api_detail::stall_policy(const runtime::Environment& env) {
  runtime::StallPolicy p;
  p.check = env.stall_check;
  p.shutdown = env.stall_shutdown;
  p.disabled = env.stall_disabled;
  return p;
}

namespace {

runtime::Engine::Hooks engine_hooks(runtime::World* w) {
  runtime::Engine::Hooks h;
  h.exchange = [w](const void* mine, std::size_t used, void* all, std::size_t bytes,
                   const runtime::Request* head) { w->exchange(mine, used, all, bytes, head); };
  h.stand_in = [w](const runtime::Ready& rd) { w->stand_in(rd); };
  // Every rank on one host: rounds move only used bytes, so larger inputs ride in them.
  if (w->env().size == 1 || w->host().moves_used_bytes())
    h.inline_limit = runtime::kInlineBytesLocal;
  h.stall = [](const std::string& text, bool ends_job) {
    hvdrun::log().warn("{}", text);
    if (!ends_job) return;
    hvdrun::log().flush();
    std::fflush(nullptr);
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
    // The engine thread may be blocked in a round with no way out: leave at once and
    // let the launcher stop the job (the device watchdog's exit code).
    std::_Exit(runtime::DeviceWatchdog::kExitCode);
  };
  h.arrived = [w](long long round) { w->stall_arrived(round); };
  h.timeline = &timeline();
  h.missing_from_round = [w](long long round) { return w->stall_missing(round); };
  return h;
}

}  // namespace

void init() {
  std::lock_guard lock(g_mu);
  retire_if_closed();
  if (g_joined) return;
  auto env = runtime::read_environment([](const char* n) { return std::getenv(n); });
  // A process started into a running elastic job runs alone until hvd.elastic.run joins
  // it (HVDRUN_JOINING): the job's ranks wait for it in their init() meanwhile, and its
  // channel is open so that it hears where the job has gone when it joins.
  const bool alone = env.joining && !g_left_alone;
  auto j = std::make_shared<Joined>();
  if (alone) {
    open_control(env);
    j->world = std::make_unique<runtime::World>(runtime::alone(std::move(env)));
  } else {
    j->world = join(env);
  }
  j->engine = std::make_unique<runtime::Engine>(engine_hooks(j->world.get()), j->world->env().size,
                                                stall_policy(j->world->env()));
  // HOROVOD_TIMELINE=file starts the timeline at init (DYNAMIC: later, start_timeline()).
  const char* path = std::getenv("HOROVOD_TIMELINE");
  if (path != nullptr && *path != '\0' && std::strcmp(path, "DYNAMIC") != 0 &&
      j->world->env().rank == 0 && !alone && !timeline().enabled())
    start_timeline_or_warn(path, env_flag("HOROVOD_TIMELINE_MARK_CYCLES"), "HOROVOD_TIMELINE");
  g_joined = std::move(j);
  publish_joined();
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  retire_if_closed();
  return g_joined != nullptr;
}

void shutdown() {
  std::shared_ptr<Joined> j;
  {
    std::lock_guard lock(g_mu);
    j = std::move(g_joined);
    publish_joined();
  }
  if (!j) return;
  // Shutdown is agreed like a collective: what the ranks still agree on runs, what can
  // then never complete fails, and everyone leaves together. After a failed collective
  // the job is over: leave without waiting for peers that are gone.
  const bool healthy = j->engine->shutdown();
  if (j->world->env().alone) {
    std::lock_guard lock(g_mu);
    g_left_alone = true;
  } else if (!healthy) {
    std::lock_guard lock(g_mu);
    g_failed_generation = std::max(g_failed_generation, j->world->env().generation);
  }
  timeline().stop();
  close_sets(*j, healthy);
  j->engine->stop();
  j->world->leave(healthy);
}

void leave() noexcept {
  std::shared_ptr<Joined> j;
  {
    std::lock_guard lock(g_mu);
    j = std::move(g_joined);
    publish_joined();
    if (j && j->world->env().alone) g_left_alone = true;
  }
  if (!j) return;
  try {
    close_sets(*j, false);
    j->engine->stop();
    j->world->leave(j->engine->failure().empty());
  } catch (const std::exception& e) {
    hvdrun::log().warn("hvdrun: leaving: {}", e.what());
  }
}

namespace {
const runtime::Environment& env_of(const char* fn) { return joined(fn)->world->env(); }
}  // namespace

int rank() { return env_of("rank").rank; }
int size() { return env_of("size").size; }
int local_rank() { return env_of("local_rank").local_rank; }
int local_size() { return env_of("local_size").local_size; }
int cross_rank() { return env_of("cross_rank").cross_rank; }
int cross_size() { return env_of("cross_size").cross_size; }
bool is_homogeneous() { return joined("is_homogeneous")->world->homogeneous(); }
int generation() { return env_of("generation").generation; }

int runtime::declare_elastic() {
  const int current = env_of("hvdrun_elastic_declare").generation;
  std::lock_guard lock(g_mu);
  if (g_control == nullptr) return 0;
  g_control->declare_elastic(current);
  return 1;
}

int runtime::joining_alone() { return env_of("hvdrun_elastic_joining").alone ? 1 : 0; }

int runtime::pending_host_update() {
  std::optional<control::Placement> next;
  {
    std::lock_guard lock(g_mu);
    if (g_control == nullptr) return 0;
    const int current =
        g_joined ? g_joined->world->env().generation : (g_placement ? g_placement->generation : -1);
    next = g_control->pending(current);
  }
  if (!next) return 0;
  return (next->hosts_added ? HVDRUN_HOSTS_ADDED : 0) |
         (next->hosts_removed ? HVDRUN_HOSTS_REMOVED : 0) |
         (next->rank < 0 ? HVDRUN_RANK_RETIRED : 0);
}

void start_timeline(const std::string& path, bool mark_cycles) {
  auto j = joined("start_timeline");
  if (j->world->env().rank == 0) start_timeline_or_warn(path, mark_cycles, "start_timeline()");
}

void stop_timeline() {
  joined("stop_timeline");
  timeline().stop();
}

bool nccl_available() {
  std::lock_guard lock(g_mu);
  return g_joined && g_joined->world->nccl() != nullptr;
}

std::string nccl_status() {
  std::lock_guard lock(g_mu);
  if (!g_joined) return "hvdrun::init() has not been called";
  return g_joined->world->nccl_status();
}

const char* version() { return HVDRUN_VERSION; }

}  // namespace hvdrun
