// The launch methods: parsing `--launcher auto|ssh|slurm|exec:COMMAND`, and the pieces of
// an exec: command line (`{host}` replaced, the agent command appended).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "launcher/options.h"

namespace hvdrun::launcher {

/// Parses a --launcher value. `exec:COMMAND` splits COMMAND into words as a shell would
/// (single and double quotes, backslash escapes; no expansion) and needs `{host}` in it.
/// Throws UsageError naming the bad part.
LauncherChoice parse_launcher(std::string_view text);

/// The words of COMMAND, split as parse_launcher() does. Throws UsageError.
std::vector<std::string> split_command_words(std::string_view command);

/// "auto", "ssh", "slurm", or "exec:WORDS...".
std::string to_string(const LauncherChoice& choice);

/// The argv of an exec: host: `exec_argv` with every `{host}` replaced by `host`, then
/// `agent_command` appended.
std::vector<std::string> exec_command_for(const std::vector<std::string>& exec_argv,
                                          const std::string& host,
                                          const std::vector<std::string>& agent_command);

}  // namespace hvdrun::launcher
