// The table and the JSON of `hvdrun check --topology`.
#include "launcher/topology/topology_report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>

#include "common/quote.h"

namespace hvdrun::launcher {
namespace {

using Rows = std::vector<std::vector<std::string>>;

// Columns padded to their widest cell, two spaces apart.
std::string table(const Rows& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += c + 1 < r.size() ? r[c] + std::string(width[c] - r[c].size() + 2, ' ') : r[c];
    }
    out += line + "\n";
  }
  return out;
}

std::string number(int n) { return n < 0 ? "-" : std::to_string(n); }

std::string json_number(int n) { return n < 0 ? "null" : std::to_string(n); }

std::string json_list(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string memory_text(std::uint64_t bytes) {
  if (bytes == 0) return "0";
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%.1f GiB", static_cast<double>(bytes) / (1U << 30U));
  return text.data();
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// The cores (Core::index) whose nearest NUMA node is `node`.
std::vector<int> cores_of(const HostTopology& t, int node) {
  std::vector<int> out;
  for (const auto& c : t.cores) {
    if (c.numa == node) out.push_back(c.index);
  }
  return out;
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string devices(const HostTopology& t) {
  std::string out;
  Rows gpus = {{"GPU", "NAME", "PCI", "NUMA"}};
  for (const auto& g : t.gpus) {
    gpus.push_back({std::to_string(g.index), g.name, or_dash(g.pci_bus_id), number(g.numa)});
  }
  out += t.gpus.empty() ? "GPUs: none\n" : table(gpus);
  Rows nics = {{"NIC", "PCI", "NUMA"}};
  for (const auto& n : t.nics) nics.push_back({n.name, or_dash(n.pci_bus_id), number(n.numa)});
  out += t.nics.empty() ? "NICs: none\n" : table(nics);
  return out;
}

}  // namespace

std::string render_topology_table(const HostTopology& t) {
  std::string out = "host " + (t.hostname.empty() ? std::string("(unnamed)") : t.hostname) + ": " +
                    plural(t.packages.size(), "package", "packages") + ", " +
                    plural(t.numa_nodes.size(), "NUMA node", "NUMA nodes") + ", " +
                    plural(t.cores.size(), "core", "cores") + ", " +
                    plural(t.allowed_cpus.size(), "CPU", "CPUs") + ", " +
                    plural(t.gpus.size(), "GPU", "GPUs") + ", " +
                    plural(t.nics.size(), "NIC", "NICs") + "\n";
  Rows numa = {{"NUMA", "PACKAGE", "MEMORY", "CORES", "CPUS"}};
  for (const auto& n : t.numa_nodes) {
    numa.push_back({std::to_string(n.os_index), number(n.package), memory_text(n.memory_bytes),
                    or_dash(cpu_list_text(cores_of(t, n.os_index))),
                    or_dash(cpu_list_text(n.cpus))});
  }
  out += table(numa) + devices(t);
  return out + "allowed CPUs: " + or_dash(cpu_list_text(t.allowed_cpus)) + "\n";
}

std::string render_topology_json(const HostTopology& t) {
  std::ostringstream out;
  out << "{\"host\": " << json_quote(t.hostname)
      << ", \"allowed_cpus\": " << json_list(t.allowed_cpus) << ", \"packages\": [";
  for (std::size_t i = 0; i < t.packages.size(); ++i) {
    std::vector<int> nodes;
    for (const auto& n : t.numa_nodes) {
      if (n.package == t.packages[i].index) nodes.push_back(n.os_index);
    }
    out << (i ? ", " : "") << "{\"index\": " << t.packages[i].index
        << ", \"numa_nodes\": " << json_list(nodes) << "}";
  }
  out << "], \"numa_nodes\": [";
  for (std::size_t i = 0; i < t.numa_nodes.size(); ++i) {
    const NumaNode& n = t.numa_nodes[i];
    out << (i ? ", " : "") << "{\"os_index\": " << n.os_index
        << ", \"package\": " << json_number(n.package) << ", \"memory_bytes\": " << n.memory_bytes
        << ", \"cores\": " << json_list(cores_of(t, n.os_index))
        << ", \"cpus\": " << json_list(n.cpus) << "}";
  }
  out << "], \"cores\": [";
  for (std::size_t i = 0; i < t.cores.size(); ++i) {
    const Core& c = t.cores[i];
    out << (i ? ", " : "") << "{\"index\": " << c.index
        << ", \"package\": " << json_number(c.package) << ", \"numa\": " << json_number(c.numa)
        << ", \"l3\": " << json_number(c.l3) << ", \"cpus\": " << json_list(c.pus) << "}";
  }
  out << "], \"gpus\": [";
  for (std::size_t i = 0; i < t.gpus.size(); ++i) {
    const Gpu& g = t.gpus[i];
    out << (i ? ", " : "") << "{\"index\": " << g.index << ", \"name\": " << json_quote(g.name)
        << ", \"pci_bus_id\": " << json_quote(g.pci_bus_id) << ", \"numa\": " << json_number(g.numa)
        << "}";
  }
  out << "], \"nics\": [";
  for (std::size_t i = 0; i < t.nics.size(); ++i) {
    const Nic& n = t.nics[i];
    out << (i ? ", " : "") << "{\"name\": " << json_quote(n.name)
        << ", \"pci_bus_id\": " << json_quote(n.pci_bus_id) << ", \"numa\": " << json_number(n.numa)
        << "}";
  }
  out << "]}\n";
  return out.str();
}

}  // namespace hvdrun::launcher
