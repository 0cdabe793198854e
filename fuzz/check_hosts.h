// Invariants shared by the host parser fuzzers: what every accepted host list and every
// error message must satisfy. A violation aborts, which libFuzzer reports as a crash.
#pragma once

#include <cctype>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "hostfile/hosts.h"
#include "hostfile/placement.h"

namespace hvdrun::fuzz {

/// How strictly check_message() judges an error message.
enum class MessageRule {
  /// One printable line in two parts, "what was wrong; what to do" (host and
  /// command-line parsers, which escape control bytes they quote).
  strict,
  /// One bounded line (parsers that quote user text as is).
  one_line,
};

inline void check_message(std::string_view msg, MessageRule rule = MessageRule::strict) {
  if (msg.empty() || msg.size() > 2000) std::abort();
  if (msg.find('\n') != std::string_view::npos) std::abort();
  if (rule == MessageRule::one_line) return;
  for (char c : msg) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) std::abort();
  }
  if (msg.find("; ") == std::string_view::npos) std::abort();
}

inline void check_hosts(const std::vector<hostfile::HostSlots>& hosts) {
  if (hosts.empty()) std::abort();
  std::set<std::string> names;
  long total = 0;
  for (const auto& h : hosts) {
    if (h.name.empty() || h.slots < 1) std::abort();
    for (char c : h.name) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == ',' || c == '#' || c == '[' || c == ']' ||
          c == '=' || c == '@')
        std::abort();
    }
    std::string lower = h.name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!names.insert(lower).second) std::abort();
    total += h.slots;
  }
  // Placement of every slot must succeed and be consistent; keep it cheap for big inputs.
  if (total > 100000) return;
  auto p = hostfile::place(hosts, std::nullopt);
  if (p.size() != total) std::abort();
  for (const auto& r : p.ranks) {
    if (r.local_rank >= r.local_size || r.cross_rank >= r.cross_size) std::abort();
  }
}

}  // namespace hvdrun::fuzz
