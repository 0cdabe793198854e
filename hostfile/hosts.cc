// Parsing of `-H` host lists and hostfiles. Both grammars share one notion of a host
// entry (`name`, `name:slots`, `[ipv6]`, `[ipv6]:slots`) so that a host written the same
// way means the same thing in both places. Errors are UsageError with one line: what was
// wrong, where, and what would be right.
#include "hostfile/hosts.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/quote.h"
#include "hostfile/host_file.h"
#include "hostfile/text.h"

namespace hvdrun::hostfile {
namespace {

using text::is_name_char;
using text::kMaxSlots;
using text::lower;

// A hostfile larger than this is certainly not a hostfile.
constexpr std::size_t kMaxHostfileBytes = 16u << 20;

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool is_ipv6_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
         c == '.';
}

// Parses a slot count strictly: decimal digits only, 1..kMaxSlots. Returns nullopt on any
// deviation; the caller knows the context needed for the message.
std::optional<int> parse_slots(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  if (s.front() < '0' || s.front() > '9') return std::nullopt;
  if (value < 1 || value > kMaxSlots) return std::nullopt;
  return value;
}

std::string bad_slots_message(std::string_view slots, std::string_view example_host,
                              std::string_view form) {
  std::string msg = "bad slot count " + quote(slots) + " for host " + quote(example_host) +
                    "; expected a whole number from 1 to " + std::to_string(kMaxSlots) + ", as in ";
  msg += form;
  return msg;
}

// Checks a host name (the part before `:slots`, or the inside of `[...]`). `bracketed`
// says whether it came from `[...]`. Returns an error text, or empty when valid.
std::string check_name(std::string_view name, bool bracketed) {
  if (bracketed) {
    if (name.empty()) return "empty IPv6 address in '[]'; expected [address] or [address]:slots";
    // A zone index (`%eth0`) may follow the address.
    std::string_view addr = name.substr(0, name.find('%'));
    std::string_view zone = name.find('%') == std::string_view::npos ? std::string_view{}
                                                                     : name.substr(addr.size() + 1);
    bool has_colon = addr.find(':') != std::string_view::npos;
    for (char c : addr) {
      if (!is_ipv6_char(c)) {
        return "bad IPv6 address " + quote(name) + ": " + quote(std::string_view(&c, 1)) +
               " is not allowed; expected hex digits and ':' inside [...], as in [fe80::1]:2";
      }
    }
    if (!has_colon) {
      return "bad IPv6 address " + quote(name) +
             " inside [...]; brackets are for IPv6 addresses, write other hosts without them";
    }
    if (name.find('%') != std::string_view::npos) {
      if (zone.empty())
        return "empty zone index after '%' in " + quote(name) + "; expected [addr%if]";
      for (char c : zone) {
        if (!is_name_char(c)) {
          return "bad zone index in " + quote(name) + "; expected an interface name after '%'";
        }
      }
    }
    return {};
  }
  if (name.empty()) return "empty host name; expected host or host:slots";
  if (name.front() == '-') {
    return "host name " + quote(name) + " starts with '-'; expected a host name or address";
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (is_name_char(c)) continue;
    if (static_cast<unsigned char>(c) >= 0x80) {
      // Shown whole (or as \xNN when it is not UTF-8), never as half a character.
      const std::size_t n = std::max<std::size_t>(utf8_sequence_length(name, i), 1);
      return "host name " + quote(name) + " contains " + quote(name.substr(i, n)) +
             ", which is not ASCII; host names may contain ASCII letters, digits, '.', '-' and "
             "'_' (write an internationalised name in its ASCII form, xn--...)";
    }
    if (c == '@') {
      return "user names are not accepted in host " + quote(name) +
             "; set 'User' for that host in the ssh config (--ssh-config) instead";
    }
    return "host name " + quote(name) + " contains " + quote(std::string_view(&c, 1)) +
           "; host names may contain letters, digits, '.', '-' and '_'";
  }
  return {};
}

// Splits one host entry (already trimmed, non-empty) into name and optional slot text.
// Returns an error text, or empty on success.
std::string split_entry(std::string_view entry, std::string& name,
                        std::optional<std::string_view>& slots_text) {
  slots_text.reset();
  if (entry.front() == '[') {
    auto close = entry.find(']');
    if (close == std::string_view::npos) {
      return quote(entry) + " has no closing ']'; expected [ipv6] or [ipv6]:slots";
    }
    std::string_view inner = entry.substr(1, close - 1);
    if (auto err = check_name(inner, true); !err.empty()) return err;
    std::string_view rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return "unexpected " + quote(rest) + " after ']' in " + quote(entry) +
               "; expected [ipv6] or [ipv6]:slots";
      }
      slots_text = rest.substr(1);
    }
    name = std::string(inner);
    return {};
  }
  auto colon = entry.find(':');
  if (colon != std::string_view::npos && entry.find(':', colon + 1) != std::string_view::npos) {
    std::string_view addr = entry.substr(0, entry.find('%'));
    std::string_view zone = entry.substr(addr.size());
    bool ipv6_like = std::all_of(addr.begin(), addr.end(), is_ipv6_char) &&
                     std::all_of(zone.begin(), zone.end(),
                                 [](char c) { return c == '%' || c == ':' || is_name_char(c); });
    if (!ipv6_like || entry.size() > 64) {
      return quote(entry) +
             " has more than one ':'; expected host:slots, or [address]:slots for an IPv6 address";
    }
    return quote(entry) + " looks like an IPv6 address; write it in brackets, as in [" +
           std::string(entry) + "] or [" + std::string(entry) + "]:slots";
  }
  std::string_view host = entry.substr(0, colon);
  if (auto err = check_name(host, false); !err.empty()) return err;
  if (colon != std::string_view::npos) slots_text = entry.substr(colon + 1);
  name = std::string(host);
  return {};
}

// The host as the user would write it, for examples in messages.
std::string display(std::string_view name) {
  if (name.find(':') != std::string_view::npos) return "[" + std::string(name) + "]";
  return std::string(name);
}

}  // namespace

std::vector<HostSlots> parse_host_list(std::string_view text) {
  const std::string kForm = "host[:slots][,host[:slots]...]";
  if (trim(text).empty()) {
    throw UsageError("-H: empty host list; expected " + kForm + ", as in -H node1:4,node2:4");
  }
  std::vector<HostSlots> hosts;
  std::map<std::string, size_t> seen;  // lower-cased name -> 1-based entry number
  size_t start = 0;
  size_t index = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string_view raw = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    ++index;
    std::string_view entry = trim(raw);
    if (entry.empty()) {
      throw UsageError("-H: empty entry " + std::to_string(index) + " in " + quote(text) +
                       "; expected " + kForm + " with no empty items between commas");
    }
    std::string name;
    std::optional<std::string_view> slots_text;
    if (auto err = split_entry(entry, name, slots_text); !err.empty()) {
      throw UsageError("-H: " + err);
    }
    HostSlots h{name, 1};
    if (slots_text && *slots_text == "auto") {
      h.auto_slots = true;
    } else if (slots_text) {
      auto slots = parse_slots(*slots_text);
      if (!slots) {
        throw UsageError("-H: " + bad_slots_message(*slots_text, name, display(name) + ":4"));
      }
      h.slots = *slots;
    }
    auto [it, inserted] = seen.emplace(lower(name), index);
    if (!inserted) {
      throw UsageError("-H: host " + quote(name) + " is listed twice (entries " +
                       std::to_string(it->second) + " and " + std::to_string(index) +
                       "); list each host once with its total slots, as in " + display(name) + ":" +
                       std::to_string(hosts[it->second - 1].slots + h.slots));
    }
    hosts.push_back(std::move(h));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

std::string parse_gpu_ids(std::string_view text, std::vector<std::string>& out) {
  out.clear();
  if (text.empty()) return "no GPU listed";
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view id = text.substr(start, comma - start);
    if (id.empty()) return "an empty GPU in " + quote(text);
    const bool ok = std::all_of(id.begin(), id.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.' ||
             c == ':' || c == '/';
    });
    if (!ok) return "bad GPU " + quote(id);
    if (std::find(out.begin(), out.end(), id) != out.end()) {
      return "GPU " + quote(id) + " listed twice";
    }
    out.emplace_back(id);
    start = comma + 1;
  }
  return {};
}

namespace {

constexpr const char* kForms = "'host slots=N', 'host:N' or 'host'";

// The key=value attributes after a hostfile entry (spaces tolerated around '='): slots=N
// sets `h.slots`, max_slots=N is checked and ignored.
void apply_attributes(std::string_view rest, std::string_view content, bool colon_slots,
                      const std::string& where, HostSlots& h) {
  bool have_slots_attr = false;
  bool have_max_slots = false;
  while (!rest.empty()) {
    size_t key_end = 0;
    while (key_end < rest.size() && !is_space(rest[key_end]) && rest[key_end] != '=') ++key_end;
    std::string_view key = rest.substr(0, key_end);
    std::string_view after = trim(rest.substr(key_end));
    if (key.empty() || after.empty() || after.front() != '=') {
      throw UsageError(where + "unexpected " + quote(key.empty() ? rest : key) + " in " +
                       quote(content) + "; expected " + kForms);
    }
    after = trim(after.substr(1));
    size_t value_end = 0;
    while (value_end < after.size() && !is_space(after[value_end])) ++value_end;
    std::string_view value = after.substr(0, value_end);
    rest = trim(after.substr(value_end));

    if (key == "slots") {
      if (colon_slots || have_slots_attr) {
        throw UsageError(where + "slot count given twice in " + quote(content) +
                         "; expected either 'host slots=N' or 'host:N'");
      }
      have_slots_attr = true;
      if (value == "auto") {
        h.auto_slots = true;
        continue;
      }
      auto slots = parse_slots(value);
      if (!slots) {
        throw UsageError(where + bad_slots_message(value, h.name, display(h.name) + " slots=4"));
      }
      h.slots = *slots;
    } else if (key == "gpus") {
      if (!h.gpus.empty()) {
        throw UsageError(where + "gpus given twice in " + quote(content) +
                         "; expected it at most once");
      }
      if (auto err = parse_gpu_ids(value, h.gpus); !err.empty()) {
        throw UsageError(where + err + " in gpus= of host " + quote(h.name) +
                         "; expected device numbers or UUIDs separated by commas, as gpus=0,2,4,6");
      }
    } else if (key == "max_slots") {
      // Accepted for hostfiles shared with mpirun; hvdrun never places more ranks on a
      // host than its slots, so the value is checked and otherwise ignored.
      if (have_max_slots) {
        throw UsageError(where + "max_slots given twice in " + quote(content) +
                         "; expected it at most once");
      }
      if (!parse_slots(value)) {
        throw UsageError(where + "bad max_slots " + quote(value) + " for host " + quote(h.name) +
                         "; expected a whole number from 1 to " + std::to_string(kMaxSlots));
      }
      have_max_slots = true;
    } else {
      throw UsageError(where + "unknown attribute " + quote(key) + " in " + quote(content) +
                       "; expected " + kForms +
                       ", with gpus=ID,... (max_slots=N is accepted and ignored)");
    }
  }
}

// One hostfile line without its comment, trimmed and not empty: the first
// whitespace-separated word is the host entry, the rest its attributes.
HostSlots parse_hostfile_line(std::string_view content, const std::string& where) {
  size_t word_end = 0;
  while (word_end < content.size() && !is_space(content[word_end])) ++word_end;
  std::string_view entry = content.substr(0, word_end);
  if (entry.find('=') != std::string_view::npos) {
    throw UsageError(where + "line " + quote(content) + " starts with " + quote(entry) +
                     " instead of a host; expected " + kForms);
  }
  if (entry.find(',') != std::string_view::npos) {
    throw UsageError(where + quote(entry) + " holds several hosts; expected one host per line as " +
                     kForms);
  }
  std::string name;
  std::optional<std::string_view> colon_slots;
  if (auto err = split_entry(entry, name, colon_slots); !err.empty()) {
    throw UsageError(where + err);
  }
  HostSlots h{name, 1};
  if (colon_slots && *colon_slots == "auto") {
    h.auto_slots = true;
  } else if (colon_slots) {
    auto slots = parse_slots(*colon_slots);
    if (!slots) {
      throw UsageError(where + bad_slots_message(*colon_slots, name, display(name) + ":4"));
    }
    h.slots = *slots;
  }
  apply_attributes(trim(content.substr(word_end)), content, colon_slots.has_value(), where, h);
  return h;
}

}  // namespace

std::vector<HostSlots> parse_hostfile_text(std::string_view text, std::string_view filename) {
  const std::string file(filename);
  // A UTF-8 byte-order mark written by some editors is not part of the first host name.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  std::vector<HostSlots> hosts;
  std::map<std::string, size_t> seen;  // lower-cased name -> line number
  size_t line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string_view line =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view content = trim(line.substr(0, line.find('#')));
    if (content.empty()) continue;
    const std::string where = file + ":" + std::to_string(line_no) + ": ";
    HostSlots h = parse_hostfile_line(content, where);
    auto [it, inserted] = seen.emplace(lower(h.name), line_no);
    if (!inserted) {
      throw UsageError(where + "host " + quote(h.name) + " is already listed at line " +
                       std::to_string(it->second) + "; list each host once with its total slots");
    }
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) {
    throw UsageError(file + ": no hosts in the hostfile; expected one host per line as " +
                     std::string(kForms));
  }
  return hosts;
}

std::vector<HostSlots> parse_hostfile(const std::string& path) {
  const std::string data = read_host_file(path, kMaxHostfileBytes, [&](const std::string& what) {
    return UsageError("--hostfile " + quote(path) + ": " + what +
                      "; expected a readable file with one host per line");
  });
  return parse_hostfile_text(data, path);
}

}  // namespace hvdrun::hostfile
