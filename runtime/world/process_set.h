// Process sets: subsets of the job's ranks with collectives of their own. Each set's
// members build their own host communicator (a segment per host among the members there,
// the frame mesh among the set's host leaders, or Gloo), their own negotiation engine and,
// on first use of GPU buffers, their own NCCL communicator, under the set's key prefix; the
// ranks outside a set only record it. Every rank creates and removes sets in the same order
// (collective calls), so every rank gives a set the same id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/env.h"
#include "runtime/engine/engine.h"
#include "runtime/host/host_comm.h"
#include "runtime/nccl/nccl_comm.h"

namespace hvdrun::runtime {

/// The environment of this rank inside a process set of `ranks` (sorted, unique, holding
/// world.rank): its index and the set's size, its position among the set's members on
/// its host (local rank and size: members with the same host id, in rank order), and the
/// set's hosts (cross rank and size: hosts numbered by their lowest member). `host_ids`
/// has one id per rank of the job (equal on ranks of one host).
Environment set_environment(const Environment& world, const std::vector<int>& ranks,
                            const std::vector<std::uint64_t>& host_ids);

/// One process set as this rank holds it.
struct ProcessSet {
  int id = 0;
  std::vector<int> ranks;  ///< the job's ranks in the set, ascending
  int rank = -1;           ///< this rank's index in the set; -1: not a member
  // A member's communicators (null outside the set); nccl is built on first device use.
  Environment env;
  std::string prefix;
  std::unique_ptr<HostComm> host;
  std::unique_ptr<NcclComm> nccl;
  std::unique_ptr<Engine> engine;
};

/// "0, 2, 4" (abbreviated past 32), for messages.
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace hvdrun::runtime
