// Parsing of the host list: `-H host[:slots],...` and `--hostfile FILE`. Pure functions;
// no I/O beyond reading the hostfile. Every malformed input throws hvdrun::UsageError with
// a one-line message saying what was wrong, where (file:line for hostfiles) and what is
// expected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::hostfile {

/// One host with its slot count, in the order the user gave it.
struct HostSlots {
  /// The host as written by the user (IPv6 addresses without their brackets).
  std::string name;
  /// Number of ranks this host may run; at least 1.
  int slots = 1;
  /// The host's GPUs for its ranks' CUDA_VISIBLE_DEVICES (hostfile `gpus=0,2,4,6`, or the
  /// slots --include kept), in the order given; empty: the host's own list.
  std::vector<std::string> gpus = {};
  /// `host:auto` (hostfile `slots=auto`, or -np auto): one slot per GPU the host has, counted
  /// before the launch (launcher/hosts/host_topologies.h); `slots` is 1 until then.
  bool auto_slots = false;

  bool operator==(const HostSlots&) const = default;
};

/// Parses a `-H` value: `host`, `host:slots`, `[ipv6]`, `[ipv6]:slots`, comma-separated
/// (`auto` for slots: one per GPU, HostSlots::auto_slots),
/// spaces around commas tolerated. A host named twice is an error.
std::vector<HostSlots> parse_host_list(std::string_view text);

/// Parses hostfile contents: one host per line as `host slots=N`, `host:N` or `host` (N may be
/// `auto`), with
/// an optional `gpus=ID,ID,...` (CUDA device numbers or UUIDs); `#` starts a comment; blank lines
/// are ignored. `filename` is used in error messages.
std::vector<HostSlots> parse_hostfile_text(std::string_view text, std::string_view filename);

/// Parses a GPU list (`0,2,4,6`, or UUIDs such as `GPU-5d2c...`: letters, digits and
/// `-_.:/`, each once) into `out`; returns what is wrong with it, or "" when it is good.
std::string parse_gpu_ids(std::string_view text, std::vector<std::string>& out);

/// Reads and parses a hostfile. An unreadable file is a UsageError naming the path.
std::vector<HostSlots> parse_hostfile(const std::string& path);

}  // namespace hvdrun::hostfile
