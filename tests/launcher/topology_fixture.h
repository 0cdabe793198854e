// Topologies written by hand for the planner's tests: the two-socket, four-NUMA-node, 64-core
// host with 8 GPUs and 2 NICs of docs/placement.md, and odd ones.
#pragma once

#include "launcher/topology/topology.h"

namespace hvdrun::launcher::testing {

/// Two packages of two NUMA nodes of 16 cores, 2 hardware threads per core (core i holds
/// CPUs i and i + 64), an L3 per 8 cores, 64 GiB per node, GPUs 2n and 2n+1 on NUMA node n,
/// NIC ib0 on node 0 and ib1 on node 2. Every CPU allowed.
HostTopology two_socket_eight_gpu();

/// One package, NUMA nodes 0 and 1 of 2 cores each (1 thread per core, 1 GiB each), node 2
/// with memory and no cores, node 1's memory 0 when `node1_without_memory`; GPU 0 on node 0,
/// GPU 1 on node 2 (the memory-only node), no NIC.
HostTopology odd_numa(bool node1_without_memory);

}  // namespace hvdrun::launcher::testing
