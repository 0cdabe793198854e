// A host's topology as the agent sends it to the launcher with its readiness (agent
// protocol 11, docs/agent-protocol.md): a few short lines of text, one per package, NUMA
// node, core, GPU and NIC, so that the launcher plans and reports every host from that
// host's own hardware. Text rather than fields of the frame: the planner's tests and a
// person reading a capture both see the same thing.
#pragma once

#include <string>
#include <string_view>

#include "launcher/topology/topology.h"

namespace hvdrun::launcher {

/// `t` as text: "host NAME", "allowed CPULIST", then "package I", "numa OS PACKAGE BYTES
/// CPULIST", "core I PACKAGE NUMA L3 CPULIST", "gpu I NAME PCI NUMA", "nic NAME PCI NUMA",
/// "if NAME" (every interface), "addr NAME" (each that is up with an address), one a line
/// ("-" for an empty field or list).
std::string topology_to_wire(const HostTopology& t);

/// The topology `text` describes. Throws std::runtime_error naming the line that is not one
/// of the forms above.
HostTopology topology_from_wire(std::string_view text);

}  // namespace hvdrun::launcher
