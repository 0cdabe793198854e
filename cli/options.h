// Command-line parsing for `hvdrun`: turns argv into a Command (which subcommand, with
// which LaunchOptions) strictly, without exiting; bad input throws hvdrun::UsageError.
#pragma once

#include <string>
#include <vector>

#include "launcher/plan/launch_options.h"

namespace hvdrun::cli {

/// What the command line asks for.
/// `agent_topology`: `hvdrun agent --topology`, the probe that `hvdrun check --topology` and
/// `--dry-run` run on each SSH host (its host's topology and GPU list, then exit).
enum class Action { run, check, agent, agent_topology, stacks, help, version, check_build };

/// The parsed command line.
struct Command {
  Action action = Action::run;
  launcher::LaunchOptions options;
  /// Text for --help (filled for Action::help).
  std::string help_text;
  /// `hvdrun stacks PID`: the hvdrun whose job to ask (0: the only one running).
  int stacks_pid = 0;
};

/// `hvdrun stacks [PID]`: `args` starts with "stacks". Throws UsageError for more arguments
/// or a PID that is not a number.
Command stacks_command(const std::vector<std::string>& args);

/// Parses `args` (argv without argv[0]). Throws UsageError with a one-line message.
Command parse_command_line(const std::vector<std::string>& args);

/// The full --help text (also used by tests that compare it with the man page).
std::string help_text();

}  // namespace hvdrun::cli
