// The launch methods: parsing `--launcher auto|ssh|slurm|exec:COMMAND`, and the pieces of
// an exec: command line (`{host}` replaced, the agent command appended).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// Parses a --launcher value. `exec:COMMAND` splits COMMAND into words as a shell would
/// (single and double quotes, backslash escapes; no expansion) and needs `{host}` in it.
/// Throws UsageError naming the bad part.
LauncherChoice parse_launcher(std::string_view text);

/// The words of COMMAND, split as parse_launcher() does. Throws UsageError.
std::vector<std::string> split_command_words(std::string_view command);

/// "auto", "ssh", "slurm", or "exec:WORDS...".
std::string to_string(const LauncherChoice& choice);

/// Where an exec: command wants the agent command as one shell line (`{command}`), for
/// commands that hand their arguments to a shell (`gcloud compute ssh {host} --command
/// {command}`, a wrapper that runs `sh -c "$*"`).
inline constexpr std::string_view kCommandPlaceholder = "{command}";

/// `words` as one POSIX shell command line: each word bare when that is safe, else in
/// single quotes, so a shell splits the line back into exactly these words.
std::string shell_line(const std::vector<std::string>& words);

/// Whether the exec: command is ssh, which joins its arguments with spaces and has the
/// remote shell split them again (so words must arrive quoted for that shell).
bool joins_its_arguments(const std::vector<std::string>& exec_argv);

/// The argv of an exec: host: `exec_argv` with every `{host}` replaced by `host`, and the
/// agent command put in: as one shell line (shell_line) where `{command}` stands, else as
/// one shell line appended when the command is ssh (joins_its_arguments), else its words
/// appended as they are (docker exec, kubectl exec --).
std::vector<std::string> exec_command_for(const std::vector<std::string>& exec_argv,
                                          const std::string& host,
                                          const std::vector<std::string>& agent_command);

}  // namespace hvdrun::launcher
