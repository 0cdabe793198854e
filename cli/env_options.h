// What the ranks' environment gets from the command line, in one list
// (LaunchOptions::env): the variables of --config-file (horovodrun's YAML), those of
// horovodrun's tuning flags, the KEY=VALUE lines of --env-file (DeepSpeed's .deepspeed_env
// format) and the -x items. Each source is checked here, before anything starts; a bad
// line is a UsageError naming the file and line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvdrun::cli {

/// Where the ranks' variables come from on the command line.
struct EnvSources {
  /// The tuning flags given (name without dashes, value; "" for a switch), in order.
  std::vector<std::pair<std::string, std::string>> knobs;
  /// --config-file FILE, or empty.
  std::string config_file;
  /// --env-file FILE, or empty.
  std::string env_file;
  /// The -x items, in order.
  std::vector<std::string> items;
};

/// The environment items for LaunchOptions::env, the weakest first (a later item wins in
/// the ranks): the config file's variables (less those a tuning flag sets: the command line
/// wins), the tuning flags' variables, the env file's entries, then the -x items (NAME,
/// NAME=VALUE or a prefix pattern NAME*). Throws UsageError.
std::vector<std::string> rank_env_items(const EnvSources& sources);

/// The NAME=VALUE entries of an env file's text, named `file` in messages: one entry a
/// line, blank lines and lines starting with '#' skipped, the value taken as written up to
/// the end of the line. Throws UsageError as "FILE:LINE: ...".
std::vector<std::string> parse_env_file(std::string_view text, const std::string& file);

/// Checks one -x item: NAME, NAME=VALUE, or NAME* (every variable whose name starts with
/// NAME); NAME has letters, digits and '_' and does not start with a digit. Throws
/// UsageError.
void check_env_item(const std::string& item);

}  // namespace hvdrun::cli
