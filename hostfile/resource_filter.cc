// --include / --exclude over the host list, with DeepSpeed's meaning (resource_filter.h).
#include "hostfile/resource_filter.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "common/quote.h"
#include "hostfile/text.h"

namespace hvdrun::hostfile {
namespace {

// One `host[:S,S,...]` of the filter.
struct FilterEntry {
  std::string host;
  bool whole = true;
  std::vector<std::string> slots;
};

// The GPU slots of a host: its gpus= list, else 0 .. slots-1.
std::vector<std::string> slots_of(const HostSlots& h) {
  if (!h.gpus.empty()) return h.gpus;
  std::vector<std::string> out;
  for (int i = 0; i < h.slots; ++i) out.push_back(std::to_string(i));
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<FilterEntry> parse_filter(std::string_view text, const std::string& flag) {
  const std::string form = "; expected host or host:slot,slot joined by '@', as node1:0,2@node2";
  std::vector<FilterEntry> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t at = std::min(text.find('@', start), text.size());
    const std::string_view entry = text.substr(start, at - start);
    start = at + 1;
    if (entry.empty()) throw UsageError(flag + ": an empty entry in " + quote(text) + form);
    FilterEntry e;
    // An IPv6 address is written in brackets, so that its colons are not the slot list's.
    const std::size_t close = entry.front() == '[' ? entry.find(']') : 0;
    if (close == std::string_view::npos) {
      throw UsageError(flag + ": " + quote(entry) + " has no closing ']'" + form);
    }
    const std::size_t colon = entry.find(':', close);
    const std::string_view name = entry.substr(0, colon);
    e.host = name.front() == '[' ? std::string(name.substr(1, name.size() - 2)) : std::string(name);
    if (e.host.empty()) throw UsageError(flag + ": no host in " + quote(entry) + form);
    if (colon != std::string_view::npos) {
      e.whole = false;
      if (auto err = parse_gpu_ids(entry.substr(colon + 1), e.slots); !err.empty()) {
        throw UsageError(flag + ": " + err + " in " + quote(entry) + form);
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// The position in `hosts` of the host `name` (compared without case); throws when absent.
std::size_t find_host(const std::vector<HostSlots>& hosts, const std::string& name,
                      const std::string& flag) {
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (text::lower(hosts[i].name) == text::lower(name)) return i;
  }
  std::vector<std::string> names;
  for (const auto& h : hosts) names.push_back(h.name);
  throw UsageError(flag + ": host " + quote(name) + " is not in the host list (" + joined(names) +
                   "); name a host of -H, the hostfile or the allocation");
}

void check_slots(const HostSlots& h, const FilterEntry& e, const std::string& flag) {
  const auto have = slots_of(h);
  for (const auto& s : e.slots) {
    if (std::find(have.begin(), have.end(), s) == have.end()) {
      throw UsageError(flag + ": host " + quote(h.name) + " has no GPU slot " + quote(s) +
                       " (its slots are " + joined(have) + "); name one of them");
    }
  }
}

}  // namespace

std::vector<HostSlots> filter_hosts(const std::vector<HostSlots>& hosts, std::string_view include,
                                    std::string_view exclude) {
  if (!include.empty() && !exclude.empty()) {
    throw UsageError("--include and --exclude were both given; give one of them");
  }
  if (include.empty() && exclude.empty()) return hosts;
  const bool keep = !include.empty();
  const std::string flag = keep ? "--include" : "--exclude";
  // Per host: the slots it keeps, whether the filter lets it take part at all (--include
  // names it), and whether a slot list touched it.
  std::vector<std::vector<std::string>> kept(hosts.size());
  std::vector<bool> named(hosts.size(), !keep);
  for (std::size_t i = 0; i < hosts.size(); ++i) kept[i] = slots_of(hosts[i]);
  std::vector<bool> sliced(hosts.size(), false);
  for (const auto& e : parse_filter(keep ? include : exclude, flag)) {
    const std::size_t i = find_host(hosts, e.host, flag);
    check_slots(hosts[i], e, flag);
    const auto all = slots_of(hosts[i]);
    if (keep) {
      named[i] = true;
      kept[i] = all;
      if (!e.whole) {
        std::erase_if(kept[i], [&](const std::string& s) {
          return std::find(e.slots.begin(), e.slots.end(), s) == e.slots.end();
        });
      }
    } else if (e.whole) {
      kept[i].clear();
    } else {
      std::erase_if(kept[i], [&](const std::string& s) {
        return std::find(e.slots.begin(), e.slots.end(), s) != e.slots.end();
      });
    }
    sliced[i] = sliced[i] || !e.whole;
  }
  std::vector<HostSlots> out;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (!named[i] || kept[i].empty()) continue;
    HostSlots h = hosts[i];
    if (sliced[i] && kept[i].size() != slots_of(h).size()) {
      h.gpus = kept[i];
      h.slots = static_cast<int>(kept[i].size());
    }
    out.push_back(std::move(h));
  }
  if (out.empty()) {
    throw UsageError(flag + " " + quote(keep ? include : exclude) +
                     " leaves no host to run on; keep at least one host or slot");
  }
  return out;
}

}  // namespace hvdrun::hostfile
