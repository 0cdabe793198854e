// A host's topology for people and programs: the table and the JSON of
// `hvdrun check --topology`.
#pragma once

#include <string>

#include "launcher/topology/topology.h"

namespace hvdrun::launcher {

/// A summary line, then one table each for the NUMA nodes (NUMA, PACKAGE, MEMORY, CORES,
/// CPUS), the GPUs (GPU, NAME, PCI, NUMA) and the NICs (NIC, PCI, NUMA), "none" for an
/// empty one, then the allowed CPUs. A NUMA node or a device whose place is unknown shows
/// "-".
std::string render_topology_table(const HostTopology& t);

/// The same as one JSON object: {"host", "allowed_cpus": [...], "packages": [{"index",
/// "numa_nodes": [...]}], "numa_nodes": [{"os_index", "package", "memory_bytes", "cores":
/// [...], "cpus": [...]}], "cores": [{"index", "package", "numa", "l3", "cpus": [...]}],
/// "gpus": [{"index", "name", "pci_bus_id", "numa"}], "nics": [{"name", "pci_bus_id",
/// "numa"}]}; an unknown number is null.
std::string render_topology_json(const HostTopology& t);

}  // namespace hvdrun::launcher
