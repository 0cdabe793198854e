// The library's joined job, shared by the files of the public API (api.cc joins and leaves
// it, api_collectives.cc runs its collectives, api_process_sets.cc adds its process sets).
// Internal: not part of the installed headers.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "runtime/core/env.h"
#include "runtime/core/timeline.h"
#include "runtime/engine/engine.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace hvdrun::api_detail {

// The joined job: the World and the engine that runs its collectives. Collectives hold a
// reference for their duration, so shutdown() on one thread cannot pull the World from
// under a collective on another. The engine is declared last so it is destroyed (and has
// run everything queued) before the World.
struct Joined {
  std::unique_ptr<runtime::World> world;
  std::unique_ptr<runtime::Engine> engine;
  // Process sets by id (0, every rank, is the world and engine above). A collective holds
  // its set for its duration, so remove_process_set() cannot pull it away.
  std::mutex sets_mu;
  std::map<int, std::shared_ptr<runtime::ProcessSet>> sets;
  int next_set = 1;  // the same on every rank: sets are added in the same order everywhere
};

/// The joined job, held for the caller's duration. Throws Error naming `fn` ("rank") when
/// this process has not joined one (before init(), after shutdown()).
std::shared_ptr<Joined> joined(const char* fn);

/// The joined job as collectives see it, or null (before init(), after shutdown()); never
/// throws and takes no lock (the stack report's thread asks it).
std::shared_ptr<Joined> joined_if_any();

/// The timeline (HOROVOD_TIMELINE, start_timeline()): one per process, written on rank 0
/// as Horovod's; never destroyed (its writer is stopped by shutdown()).
runtime::Timeline& timeline();

/// The stall inspector's settings in `env`.
runtime::StallPolicy stall_policy(const runtime::Environment& env);

}  // namespace hvdrun::api_detail
