// `hvdrun stacks [PID]` (options.h): no options, at most the pid of an hvdrun.
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/error.h"

namespace hvdrun::cli {

Command stacks_command(const std::vector<std::string>& args) {
  Command cmd;
  cmd.action = Action::stacks;
  if (args.size() > 2)
    throw UsageError(
        "'hvdrun stacks' takes at most one argument, the pid of the hvdrun to ask; got " +
        std::to_string(args.size() - 1));
  if (args.size() == 2) {
    const std::string& p = args[1];
    if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(p) == 0)
      throw UsageError("'hvdrun stacks " + p +
                       "': expected the pid of a running hvdrun, as in hvdrun stacks 4242");
    cmd.stacks_pid = std::stoi(p);
  }
  return cmd;
}

}  // namespace hvdrun::cli
