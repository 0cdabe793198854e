// The agent's topology report: HostTopology to text and back (topology_wire.h).
#include "launcher/topology/topology_wire.h"

#include <charconv>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace hvdrun::launcher {
namespace {

std::string field(const std::string& s) { return s.empty() ? "-" : s; }
std::string list_field(const std::vector<int>& v) { return v.empty() ? "-" : cpu_list_text(v); }

// The words of one line, split at single spaces.
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    const auto end = line.find(' ');
    out.push_back(line.substr(0, end));
    if (end == std::string_view::npos) break;
    line.remove_prefix(end + 1);
  }
  return out;
}

class LineReader {
 public:
  LineReader(std::string_view line, std::size_t arity) : line_(line), w_(words(line)) {
    if (w_.size() != arity) bad();
  }
  std::string text(std::size_t i) const { return w_[i] == "-" ? "" : std::string(w_[i]); }
  template <typename T>
  T number(std::size_t i) const {
    T v{};
    const auto* first = w_[i].data();
    const auto* last = first + w_[i].size();
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc{} || end != last) bad();
    return v;
  }
  std::vector<int> list(std::size_t i) const {
    std::vector<int> out;
    if (w_[i] == "-") return out;
    for (auto part : words_at(w_[i], ',')) {
      const auto dash = part.find('-');
      const int lo = parse(part.substr(0, dash));
      const int hi = dash == std::string_view::npos ? lo : parse(part.substr(dash + 1));
      if (hi < lo || hi - lo > (1 << 20)) bad();
      for (int c = lo; c <= hi; ++c) out.push_back(c);
    }
    return out;
  }
  [[noreturn]] void bad() const {
    throw std::runtime_error("topology report: line '" + std::string(line_) +
                             "' is not one of its forms");
  }

 private:
  static std::vector<std::string_view> words_at(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    for (auto end = s.find(sep);; end = s.find(sep)) {
      out.push_back(s.substr(0, end));
      if (end == std::string_view::npos) return out;
      s.remove_prefix(end + 1);
    }
  }
  int parse(std::string_view s) const {
    int v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v < 0) bad();
    return v;
  }
  std::string_view line_;
  std::vector<std::string_view> w_;
};

void read_line(std::string_view line, HostTopology& t) {
  const auto kind = line.substr(0, line.find(' '));
  if (kind == "host") {
    t.hostname = LineReader(line, 2).text(1);
  } else if (kind == "allowed") {
    t.allowed_cpus = LineReader(line, 2).list(1);
  } else if (kind == "package") {
    t.packages.push_back({LineReader(line, 2).number<int>(1)});
  } else if (kind == "numa") {
    const LineReader r(line, 5);
    t.numa_nodes.push_back(
        {r.number<int>(1), r.number<int>(2), r.number<std::uint64_t>(3), r.list(4)});
  } else if (kind == "core") {
    const LineReader r(line, 6);
    t.cores.push_back(
        {r.number<int>(1), r.number<int>(2), r.number<int>(3), r.number<int>(4), r.list(5)});
  } else if (kind == "gpu") {
    const LineReader r(line, 5);
    t.gpus.push_back({r.number<int>(1), r.text(2), r.text(3), r.number<int>(4)});
  } else if (kind == "if") {
    t.interfaces.push_back(LineReader(line, 2).text(1));
  } else if (kind == "addr") {
    t.addressed.push_back(LineReader(line, 2).text(1));
  } else if (kind == "nic") {
    const LineReader r(line, 4);
    t.nics.push_back({r.text(1), r.text(2), r.number<int>(3)});
  } else {
    LineReader(line, 0).bad();
  }
}

}  // namespace

std::string topology_to_wire(const HostTopology& t) {
  std::string out = "host " + field(t.hostname) + "\nallowed " + list_field(t.allowed_cpus) + "\n";
  for (const auto& p : t.packages) out += "package " + std::to_string(p.index) + "\n";
  for (const auto& n : t.numa_nodes) {
    out += "numa " + std::to_string(n.os_index) + " " + std::to_string(n.package) + " " +
           std::to_string(n.memory_bytes) + " " + list_field(n.cpus) + "\n";
  }
  for (const auto& c : t.cores) {
    out += "core " + std::to_string(c.index) + " " + std::to_string(c.package) + " " +
           std::to_string(c.numa) + " " + std::to_string(c.l3) + " " + list_field(c.pus) + "\n";
  }
  for (const auto& g : t.gpus) {
    out += "gpu " + std::to_string(g.index) + " " + field(g.name) + " " + field(g.pci_bus_id) +
           " " + std::to_string(g.numa) + "\n";
  }
  for (const auto& n : t.nics) {
    out += "nic " + field(n.name) + " " + field(n.pci_bus_id) + " " + std::to_string(n.numa) + "\n";
  }
  for (const auto& name : t.interfaces) out += "if " + field(name) + "\n";
  for (const auto& name : t.addressed) out += "addr " + field(name) + "\n";
  return out;
}

HostTopology topology_from_wire(std::string_view text) {
  HostTopology t;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const auto line = text.substr(0, end);
    if (!line.empty()) read_line(line, t);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return t;
}

}  // namespace hvdrun::launcher
