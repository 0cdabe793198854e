// Parsers of the schedulers' allocation variables. Each works on the text alone, in one
// pass, and stops at the first malformed part with a message that quotes it: a 10,000-node
// Slurm list expands in well under a millisecond (bench/hostlist_bench.cc).
#include "hostfile/scheduler.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "common/error.h"
#include "common/quote.h"
#include "hostfile/host_file.h"
#include "hostfile/text.h"

namespace hvdrun::hostfile {
namespace {

using text::is_name_char;
using text::kMaxSlots;
using text::lower;

// A typo in a range (`n[1-100000000]`) fails here rather than as an out-of-memory later.
constexpr std::size_t kMaxHosts = 1'000'000;
constexpr std::size_t kMaxFileBytes = 64u << 20;
constexpr const char* kSlurmForm = "a Slurm host list such as node[01-04,07],gpu5";

bool is_white(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool is_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A whole number of at most 9 digits; nullopt otherwise.
std::optional<long> parse_number(std::string_view s) {
  if (!is_digits(s) || s.size() > 9) return std::nullopt;
  long v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

std::optional<int> parse_slot_count(std::string_view s) {
  auto v = parse_number(s);
  if (!v || *v < 1 || *v > kMaxSlots) return std::nullopt;
  return static_cast<int>(*v);
}

std::string slots_expected() {
  return "expected a whole number from 1 to " + std::to_string(kMaxSlots);
}

UsageError bad(std::string_view variable, const std::string& what) {
  return UsageError(std::string(variable) + ": " + what);
}

// One numeric range of a bracket group: lo..hi, printed `width` digits wide (zero padded).
struct Range {
  long lo = 0;
  long hi = 0;
  int width = 0;
};

// A host list item split into literal parts and bracket groups: `parts[i]` comes before
// `groups[i]`; `parts` has one more element than `groups`.
struct Pattern {
  std::vector<std::string_view> parts;
  std::vector<std::vector<Range>> groups;
};

std::vector<Range> parse_group(std::string_view body, std::string_view item,
                               std::string_view variable) {
  std::vector<Range> ranges;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = body.find(',', start);
    std::string_view r =
        body.substr(start, comma == std::string_view::npos ? comma : comma - start);
    std::size_t dash = r.find('-');
    std::string_view lo_text = r.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : r.substr(dash + 1);
    auto lo = parse_number(lo_text);
    auto hi = parse_number(hi_text);
    if (!lo || !hi) {
      throw bad(variable, "bad range " + quote(r) + " in " + quote(item) +
                              "; expected N or N-M (at most 9 digits each), as in node[01-04,07]");
    }
    if (*hi < *lo) {
      throw bad(variable, "range " + quote(r) + " in " + quote(item) +
                              " runs backwards; expected the low bound first, as in node[1-4]");
    }
    ranges.push_back({*lo, *hi, static_cast<int>(lo_text.size())});
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranges;
}

void check_literal(std::string_view part, std::string_view item, std::string_view variable) {
  for (char c : part) {
    if (is_name_char(c)) continue;
    throw bad(variable, "host name " + quote(item) + " contains " + quote(std::string_view(&c, 1)) +
                            "; expected " + kSlurmForm);
  }
}

Pattern parse_pattern(std::string_view item, std::string_view variable) {
  Pattern p;
  std::size_t pos = 0;
  while (true) {
    std::size_t open = item.find('[', pos);
    std::string_view part = item.substr(pos, open == std::string_view::npos ? open : open - pos);
    if (std::size_t close = part.find(']'); close != std::string_view::npos) {
      throw bad(variable, "unexpected ']' in " + quote(item) + "; expected " + kSlurmForm);
    }
    check_literal(part, item, variable);
    p.parts.push_back(part);
    if (open == std::string_view::npos) break;
    std::size_t close = item.find(']', open);
    if (close == std::string_view::npos) {
      throw bad(variable, "unclosed '[' in " + quote(item) + "; expected " + kSlurmForm);
    }
    std::string_view body = item.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string_view::npos) {
      throw bad(variable, "'[' inside brackets in " + quote(item) + "; expected " + kSlurmForm);
    }
    p.groups.push_back(parse_group(body, item, variable));
    pos = close + 1;
  }
  if (p.parts.front().empty() && p.groups.empty()) {
    throw bad(variable, "empty host name; expected " + std::string(kSlurmForm));
  }
  return p;
}

std::size_t count_names(const Pattern& p, std::string_view item, std::string_view variable) {
  std::size_t total = 1;
  for (const auto& g : p.groups) {
    std::size_t n = 0;
    for (const auto& r : g) n += static_cast<std::size_t>(r.hi - r.lo + 1);
    if (n > kMaxHosts || total * n > kMaxHosts) {
      throw bad(variable, quote(item) + " names more than " + std::to_string(kMaxHosts) +
                              " hosts; expected " + kSlurmForm);
    }
    total *= n;
  }
  return total;
}

void append_number(std::string& out, long v, int width) {
  char buf[16];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  for (auto digits = end - buf; digits < width; ++digits) out.push_back('0');
  out.append(buf, end);
}

// Every combination of the groups from `g` on, appended to `prefix`.
void expand(const Pattern& p, std::size_t g, std::string& prefix, std::vector<std::string>& out) {
  const std::size_t keep = prefix.size();
  prefix.append(p.parts[g]);
  if (g == p.groups.size()) {
    out.push_back(prefix);
  } else {
    const std::size_t base = prefix.size();
    for (const auto& r : p.groups[g]) {
      for (long v = r.lo; v <= r.hi; ++v) {
        append_number(prefix, v, r.width);
        expand(p, g + 1, prefix, out);
        prefix.resize(base);
      }
    }
  }
  prefix.resize(keep);
}

// Splits at top-level separators (commas and whitespace outside brackets); empty items
// are skipped, as Slurm does.
std::vector<std::string_view> split_items(std::string_view text) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const bool end = i == text.size();
    const char c = end ? ',' : text[i];
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (depth == 0 && (c == ',' || is_white(c))) {
      if (i > start) items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth > 0) items.push_back(text.substr(start));
  return items;
}

char to_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// Hashing and comparing names without case, without copying them.
struct NoCaseHash {
  std::size_t operator()(std::string_view s) const noexcept {
    std::size_t h = 14695981039346656037ULL;
    for (char c : s) h = (h ^ static_cast<unsigned char>(to_lower(c))) * 1099511628211ULL;
    return h;
  }
};
struct NoCaseEqual {
  bool operator()(std::string_view a, std::string_view b) const noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (to_lower(a[i]) != to_lower(b[i])) return false;
    }
    return true;
  }
};

// Adds `slots` to `name`, appending it when new: hosts keep their first position.
void add_slots(std::vector<HostSlots>& hosts, std::unordered_map<std::string, std::size_t>& index,
               std::string_view name, int slots, std::string_view variable) {
  auto [it, inserted] = index.try_emplace(lower(name), hosts.size());
  if (inserted) {
    hosts.push_back({std::string(name), slots});
    return;
  }
  HostSlots& h = hosts[it->second];
  if (h.slots + slots > kMaxSlots) {
    throw bad(variable, "host " + quote(name) + " has more than " + std::to_string(kMaxSlots) +
                            " slots in all; expected at most that many per host");
  }
  h.slots += slots;
}

// Names what is wrong with a host name, the offending character shown by itself (quote()
// shows a control byte as \x07, a UTF-8 character whole), as -H does.
void check_host_name(std::string_view name, std::string_view where, std::string_view form) {
  std::string why;
  if (name.empty()) {
    why = "is empty";
  } else if (name.front() == '-') {
    why = "starts with '-'";
  }
  for (std::size_t i = 0; i < name.size() && why.empty(); ++i) {
    if (is_name_char(name[i])) continue;
    const std::size_t n = std::max<std::size_t>(utf8_sequence_length(name, i), 1);
    why = "contains " + quote(name.substr(i, n));
  }
  if (why.empty()) return;
  throw UsageError(std::string(where) + ": host name " + quote(name) + " " + why + "; expected " +
                   std::string(form));
}

std::string read_file(const std::string& path, std::string_view variable) {
  return read_host_file(path, kMaxFileBytes, [&](const std::string& what) {
    return UsageError(std::string(variable) + "=" + path + ": " + what +
                      "; run inside the allocation, or pass -H/--hostfile");
  });
}

// Calls `fn(line, line_no)` for each line without its '\r', comments not stripped.
template <typename Fn>
void for_each_line(std::string_view text, Fn fn) {
  std::size_t start = 0;
  std::size_t line_no = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    std::string_view line = text.substr(start, nl == std::string_view::npos ? nl : nl - start);
    start = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fn(line, line_no);
  }
}

std::string_view next_word(std::string_view& rest) {
  while (!rest.empty() && is_white(rest.front())) rest.remove_prefix(1);
  std::size_t end = 0;
  while (end < rest.size() && !is_white(rest[end])) ++end;
  std::string_view word = rest.substr(0, end);
  rest.remove_prefix(end);
  return word;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(std::string_view text, std::string_view variable) {
  std::vector<std::string_view> items = split_items(text);
  if (items.empty()) throw bad(variable, "empty host list; expected " + std::string(kSlurmForm));
  // First every item is checked and counted, then the names are made in one vector of the
  // right size: a long list of plain names costs no allocation beyond its result.
  auto is_plain = [](std::string_view item) {
    return item.find_first_of("[]") == std::string_view::npos;
  };
  std::size_t total = 0;
  for (auto item : items) {
    if (is_plain(item)) {
      check_literal(item, item, variable);
      ++total;
    } else {
      total += count_names(parse_pattern(item, variable), item, variable);
    }
    if (total > kMaxHosts) {
      throw bad(variable,
                "names more than " + std::to_string(kMaxHosts) + " hosts; expected " + kSlurmForm);
    }
  }
  std::vector<std::string> names;
  names.reserve(total);
  std::string prefix;
  for (auto item : items) {
    if (is_plain(item)) {
      names.emplace_back(item);
    } else {
      expand(parse_pattern(item, variable), 0, prefix, names);
    }
  }
  for (const auto& n : names) {
    if (n.front() == '-') {
      throw bad(variable, "host name " + quote(n) + " starts with '-'; expected " + kSlurmForm);
    }
  }
  return names;
}

std::vector<int> expand_slurm_tasks_per_node(std::string_view text) {
  constexpr std::string_view kVar = "SLURM_TASKS_PER_NODE";
  constexpr const char* kForm = "counts such as 4(x2),2,1 (N or N(xREPEAT), comma-separated)";
  std::vector<int> counts;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    std::string_view count_text = item.substr(0, item.find('('));
    long repeat = 1;
    if (count_text.size() != item.size()) {
      std::string_view rep = item.substr(count_text.size());
      auto r = rep.size() > 3 && rep.substr(0, 2) == "(x" && rep.back() == ')'
                   ? parse_number(rep.substr(2, rep.size() - 3))
                   : std::nullopt;
      if (!r || *r < 1) throw bad(kVar, "bad repeat " + quote(rep) + "; expected " + kForm);
      repeat = *r;
    }
    auto count = parse_number(count_text);
    if (!count || *count > kMaxSlots) {
      throw bad(kVar, "bad task count " + quote(item) + "; expected " + kForm);
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > kMaxHosts) {
      throw bad(kVar, "names more than " + std::to_string(kMaxHosts) + " nodes; expected " + kForm);
    }
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(*count));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return counts;
}

std::vector<HostSlots> parse_slurm_allocation(std::string_view nodelist,
                                              std::string_view tasks_per_node) {
  std::vector<std::string> names = expand_slurm_hostlist(nodelist);
  std::vector<int> counts = expand_slurm_tasks_per_node(tasks_per_node);
  if (names.size() != counts.size()) {
    throw UsageError("SLURM_TASKS_PER_NODE: " + quote(tasks_per_node) + " gives counts for " +
                     std::to_string(counts.size()) + " nodes but SLURM_JOB_NODELIST " +
                     quote(nodelist) + " names " + std::to_string(names.size()) +
                     "; run inside one allocation, or pass -H/--hostfile");
  }
  std::vector<HostSlots> hosts;
  hosts.reserve(names.size());
  // Open addressing over the names themselves: no node allocation per name.
  std::size_t buckets = 16;
  while (buckets < names.size() * 2) buckets *= 2;
  std::vector<const std::string*> table(buckets, nullptr);
  for (const auto& name : names) {
    std::size_t i = NoCaseHash{}(name) & (buckets - 1);
    while (table[i] != nullptr && !NoCaseEqual{}(*table[i], name)) i = (i + 1) & (buckets - 1);
    const bool duplicate = table[i] != nullptr;
    table[i] = &name;
    if (duplicate) {
      throw UsageError("SLURM_JOB_NODELIST: node " + quote(name) + " is listed twice in " +
                       quote(nodelist) + "; expected each node once");
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    // A node given no task (`0`) takes no part.
    if (counts[i] > 0) hosts.push_back({std::move(names[i]), counts[i]});
  }
  if (hosts.empty()) {
    throw UsageError("SLURM_TASKS_PER_NODE: " + quote(tasks_per_node) +
                     " gives no node a task; expected at least one count above 0");
  }
  return hosts;
}

std::vector<HostSlots> parse_pbs_nodefile_text(std::string_view text, std::string_view filename) {
  std::vector<HostSlots> hosts;
  std::unordered_map<std::string, std::size_t> index;
  const std::string var = "PBS_NODEFILE " + std::string(filename);
  for_each_line(text, [&](std::string_view line, std::size_t line_no) {
    std::string_view rest = line;
    std::string_view name = next_word(rest);
    if (name.empty()) return;
    const std::string where = var + ":" + std::to_string(line_no);
    if (!next_word(rest).empty()) {
      throw UsageError(where + ": unexpected text after the host in " + quote(line) +
                       "; expected one host name per line, one line per slot");
    }
    check_host_name(name, where, "one host name per line, one line per slot");
    add_slots(hosts, index, name, 1, where);
  });
  if (hosts.empty()) {
    throw UsageError(var + ": no hosts; expected one host name per line, one line per slot");
  }
  return hosts;
}

std::vector<HostSlots> parse_lsf_mcpu_hosts(std::string_view text) {
  constexpr std::string_view kVar = "LSB_MCPU_HOSTS";
  constexpr const char* kForm = "host and slot count pairs, as in 'hostA 4 hostB 2'";
  std::vector<HostSlots> hosts;
  std::unordered_map<std::string, std::size_t> index;
  std::string_view rest = text;
  for (std::string_view name = next_word(rest); !name.empty(); name = next_word(rest)) {
    std::string_view slots_text = next_word(rest);
    if (slots_text.empty()) {
      throw bad(kVar, "host " + quote(name) + " has no slot count; expected " + kForm);
    }
    check_host_name(name, kVar, kForm);
    auto slots = parse_slot_count(slots_text);
    if (!slots) {
      throw bad(kVar, "bad slot count " + quote(slots_text) + " for host " + quote(name) + "; " +
                          slots_expected());
    }
    add_slots(hosts, index, name, *slots, kVar);
  }
  if (hosts.empty()) throw bad(kVar, std::string("empty; expected ") + kForm);
  return hosts;
}

std::vector<HostSlots> parse_sge_pe_hostfile_text(std::string_view text,
                                                  std::string_view filename) {
  constexpr const char* kForm = "'host slots queue processors' per line";
  std::vector<HostSlots> hosts;
  std::unordered_map<std::string, std::size_t> index;
  const std::string var = "PE_HOSTFILE " + std::string(filename);
  for_each_line(text, [&](std::string_view line, std::size_t line_no) {
    std::string_view rest = line;
    std::string_view name = next_word(rest);
    if (name.empty()) return;
    const std::string where = var + ":" + std::to_string(line_no);
    std::string_view slots_text = next_word(rest);
    check_host_name(name, where, kForm);
    auto slots = parse_slot_count(slots_text);
    if (!slots) {
      throw UsageError(where + ": bad slot count " + quote(slots_text) + " for host " +
                       quote(name) + "; " + slots_expected() + ", in " + kForm);
    }
    add_slots(hosts, index, name, *slots, where);
  });
  if (hosts.empty()) throw UsageError(var + ": no hosts; expected " + kForm);
  return hosts;
}

std::optional<Allocation> detect_allocation(const GetEnv& getenv) {
  auto value = [&](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  if (auto nodes = value("SLURM_JOB_NODELIST")) {
    auto tasks = value("SLURM_TASKS_PER_NODE");
    if (!tasks) {
      throw UsageError(
          "SLURM_TASKS_PER_NODE is not set although SLURM_JOB_NODELIST is; run inside a Slurm "
          "allocation (salloc/sbatch), or pass -H/--hostfile");
    }
    return Allocation{"slurm", "SLURM_JOB_NODELIST=" + *nodes,
                      parse_slurm_allocation(*nodes, *tasks)};
  }
  if (auto file = value("PBS_NODEFILE")) {
    return Allocation{"pbs", "PBS_NODEFILE=" + *file,
                      parse_pbs_nodefile_text(read_file(*file, "PBS_NODEFILE"), *file)};
  }
  if (auto hosts = value("LSB_MCPU_HOSTS")) {
    return Allocation{"lsf", "LSB_MCPU_HOSTS=" + *hosts, parse_lsf_mcpu_hosts(*hosts)};
  }
  if (auto file = value("PE_HOSTFILE")) {
    return Allocation{"sge", "PE_HOSTFILE=" + *file,
                      parse_sge_pe_hostfile_text(read_file(*file, "PE_HOSTFILE"), *file)};
  }
  return std::nullopt;
}

}  // namespace hvdrun::hostfile
