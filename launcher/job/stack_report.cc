// The stack report's reading and grouping (stack_report.h). A rank's report holds, in this
// order, what its writers put there (common/stack_file.h): Python's threads as faulthandler
// dumps them ("Current thread 0x... (most recent call first):", then `  File "f.py", line N
// in fn` innermost first), the native frames of the thread the signal reached (a program
// without Python), the "hvdrun-wait:" lines, and the end line.
#include "launcher/job/stack_report.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/stack_file.h"

namespace hvdrun::launcher {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// Frames of hvdrun's Python package, the standard library and installed packages: the
// innermost frame of the program's own code says more about where it is.
bool library_frame(const std::string& file) {
  for (const char* part : {"/lib/python3.", "-packages/", "/hvdrun/torch/", "/hvdrun/tensorflow/",
                           "/hvdrun/keras/", "/hvdrun/_", "/hvdrun/__init__.py", "<frozen "}) {
    if (file.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The innermost frame of the program's own code in the thread the report centres on: the
// current thread (the one the signal reached: the main thread) when named, else the last
// one dumped (faulthandler lists the oldest thread last).
std::string python_where(const std::vector<std::string>& stack) {
  static const std::regex frame(R"re(^\s+File "(.*)", line (\d+) in (.*)$)re");
  std::vector<std::vector<std::smatch>> blocks;
  int current = -1;
  for (const std::string& line : stack) {
    if (starts_with(line, "Thread 0x") || starts_with(line, "Current thread 0x")) {
      if (starts_with(line, "Current thread")) current = static_cast<int>(blocks.size());
      blocks.emplace_back();
      continue;
    }
    std::smatch m;
    if (!blocks.empty() && std::regex_match(line, m, frame)) blocks.back().push_back(m);
  }
  if (blocks.empty()) return {};
  const auto& block = blocks[current >= 0 ? static_cast<std::size_t>(current) : blocks.size() - 1];
  if (block.empty()) return {};
  auto pick = std::find_if(block.begin(), block.end(),
                           [](const std::smatch& m) { return !library_frame(m[1].str()); });
  const std::smatch& m = pick != block.end() ? *pick : block.front();
  return base_name(m[1].str()) + ":" + m[2].str() + " in " + m[3].str();
}

// The innermost native frame outside the C library, libhvdrun, the C++ runtime and a
// sanitizer's (those are the signal handler's own frames, its interceptors', and the calls
// the program waits in).
std::string native_where(const std::vector<std::string>& frames) {
  for (const std::string& f : frames) {
    bool system = false;
    for (const char* lib : {"libc.so", "libhvdrun", "libstdc++", "ld-linux", "libpthread",
                            "libasan", "libtsan", "libubsan"})
      system = system || f.find(lib) != std::string::npos;
    if (system) continue;
    const std::string name = base_name(f);
    return name.substr(0, name.find('['));
  }
  return {};
}

}  // namespace

ReadStacks read_stacks(const std::string& text) {
  static const std::regex address("0x[0-9a-fA-F]+");
  static const std::regex waited(" waiting [0-9.]+ s$");
  ReadStacks r;
  std::vector<std::string> python, native;
  bool in_native = false;
  for (const std::string& line : lines_of(text)) {
    if (line == stack_file::kEndLine) continue;
    if (starts_with(line, stack_file::kNoWait)) {
      r.no_wait_note = line.substr(std::string(stack_file::kNoWait).size());
      continue;
    }
    if (starts_with(line, stack_file::kWaitPrefix)) {
      r.waits.push_back(line.substr(std::string(stack_file::kWaitPrefix).size()));
      r.key += std::regex_replace(r.waits.back(), waited, "") + "\n";
      continue;
    }
    if (line == stack_file::kNativeLine) {
      in_native = true;
      r.stacks += "native frames of the thread the signal reached:\n";
      continue;
    }
    (in_native ? native : python).push_back(line);
    r.stacks += line + "\n";
    r.key += std::regex_replace(line, address, "0x_") + "\n";
  }
  while (!r.stacks.empty() && r.stacks.back() == '\n' &&
         (r.stacks.size() == 1 || r.stacks[r.stacks.size() - 2] == '\n'))
    r.stacks.pop_back();
  r.where = python_where(python);
  if (r.where.empty()) r.where = native_where(native);
  if (r.waits.empty() && !r.no_wait_note.empty()) r.key += "none" + r.no_wait_note + "\n";
  return r;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

namespace {

// The group's line after "ranks N: ".
std::string summary(const RankStackAnswer& a, const ReadStacks& r, const std::string& wait_text) {
  using Kind = RankStackAnswer::Kind;
  if (a.kind == Kind::no_answer) return "no answer within " + wait_text;
  if (a.kind == Kind::no_handler) {
    std::string t = a.text;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    return t;
  }
  if (a.kind == Kind::partial && r.stacks.empty()) return "no answer within " + wait_text;
  std::string s = r.where.empty() ? std::string("(no frame)") : r.where;
  if (a.kind == Kind::partial)
    return s + ", collectives unknown (libhvdrun did not answer within " + wait_text + ")";
  if (r.waits.empty()) return s + ", no collective" + r.no_wait_note;
  s += " -> ";
  for (std::size_t i = 0; i < r.waits.size(); ++i) s += (i ? "; " : "") + r.waits[i];
  return s;
}

}  // namespace

std::string format_stack_report(std::vector<RankStackAnswer> answers, const std::string& why,
                                const std::string& wait_text) {
  std::sort(answers.begin(), answers.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  struct Group {
    std::vector<int> ranks;
    std::string line;
    std::string stacks;
  };
  std::vector<Group> groups;
  std::map<std::string, std::size_t> by_key;
  for (const RankStackAnswer& a : answers) {
    const ReadStacks r = read_stacks(a.text);
    const bool comparable = a.kind == RankStackAnswer::Kind::whole ||
                            a.kind == RankStackAnswer::Kind::partial ||
                            a.kind == RankStackAnswer::Kind::no_answer;
    // Ranks described from /proc are told apart: their pids differ anyway.
    const std::string key = std::to_string(static_cast<int>(a.kind)) + "\n" +
                            (comparable ? r.key : std::to_string(a.rank));
    auto [it, fresh] = by_key.emplace(key, groups.size());
    if (fresh) groups.push_back({{}, summary(a, r, wait_text), r.stacks});
    groups[it->second].ranks.push_back(a.rank);
  }
  std::string out = "hvdrun: where the ranks are (" + why + "):\n";
  for (const Group& g : groups) {
    out += (g.ranks.size() > 1 ? "ranks " : "rank ") + rank_ranges(g.ranks) + ": " + g.line + "\n";
    for (const std::string& line : lines_of(g.stacks)) out += "    " + line + "\n";
  }
  return out;
}

}  // namespace hvdrun::launcher
