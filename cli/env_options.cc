// The ranks' environment from the command line (see env_options.h).
#include "cli/env_options.h"

#include <algorithm>
#include <map>

#include "common/error.h"
#include "common/quote.h"
#include "compat/horovod_config.h"
#include "compat/horovod_flags.h"
#include "hostfile/host_file.h"

namespace hvdrun::cli {
namespace {

constexpr std::size_t kMaxEnvFileBytes = 1 << 20;

bool valid_env_name(std::string_view name) {
  if (name.empty() || (name.front() >= '0' && name.front() <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string read_env_file(const std::string& path) {
  return hostfile::read_host_file(path, kMaxEnvFileBytes, [&](const std::string& what) {
    return UsageError("--env-file " + quote(path) + ": " + what +
                      "; expected a readable file of KEY=VALUE lines");
  });
}

}  // namespace

void check_env_item(const std::string& item) {
  const auto eq = item.find('=');
  std::string_view name = std::string_view(item).substr(0, eq);
  const bool pattern = eq == std::string::npos && !name.empty() && name.back() == '*';
  if (pattern) name.remove_suffix(1);
  if (valid_env_name(name)) return;
  if (pattern) {
    throw UsageError("bad pattern " + quote(item) +
                     " for -x/--env; expected a name prefix then '*', as in -x 'TORCH_*'");
  }
  throw UsageError("bad value " + quote(item) +
                   " for -x/--env; expected NAME or NAME=VALUE "
                   "where NAME has letters, digits and '_' and does not start with a digit");
}

std::vector<std::string> parse_env_file(std::string_view text, const std::string& file) {
  std::vector<std::string> out;
  std::map<std::string, int, std::less<>> seen;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    // Surrounding blanks go, as DeepSpeed's reader strips each line.
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = file + ":" + std::to_string(line_no) + ": ";
    const auto eq = line.find('=');
    const std::string_view name = line.substr(0, eq);
    if (eq == std::string_view::npos) {
      throw UsageError(where + "expected KEY=VALUE, got " + quote(line) +
                       "; to pass a variable of this shell, use -x " + std::string(name));
    }
    if (!valid_env_name(name)) {
      throw UsageError(where + "bad name " + quote(name) + " in " + quote(line) +
                       "; expected KEY=VALUE where KEY has letters, digits and '_' and does not "
                       "start with a digit");
    }
    auto [it, fresh] = seen.emplace(std::string(name), line_no);
    if (!fresh) {
      throw UsageError(where + std::string(name) + " is set twice (lines " +
                       std::to_string(it->second) + " and " + std::to_string(line_no) +
                       "); keep one");
    }
    out.emplace_back(line);
  }
  return out;
}

std::vector<std::string> rank_env_items(const EnvSources& sources) {
  for (const auto& item : sources.items) check_env_item(item);
  std::vector<std::string> env;
  if (!sources.config_file.empty()) {
    env = compat::read_horovod_config(sources.config_file, sources.knobs);
  }
  for (auto& e : compat::horovod_knob_env(sources.knobs)) env.push_back(std::move(e));
  if (!sources.env_file.empty()) {
    for (auto& e : parse_env_file(read_env_file(sources.env_file), sources.env_file))
      env.push_back(std::move(e));
  }
  env.insert(env.end(), sources.items.begin(), sources.items.end());
  return env;
}

}  // namespace hvdrun::cli
