// libFuzzer target for the command-line parser: the input is argv split at NUL bytes.
// Every input must either parse or throw UsageError with a one-line message; the parser
// must never exit, crash or throw anything else. --hostfile is left out so that the
// fuzzer never reads arbitrary paths (the hostfile parser has its own target).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/options.h"
#include "common/error.h"
#include "fuzz/check_hosts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  if (size == 0) args.clear();
  for (const auto& a : args) {
    if (a.find("hostf") != std::string::npos) return 0;
  }
  try {
    auto cmd = hvdrun::cli::parse_command_line(args);
    if (cmd.action == hvdrun::cli::Action::run && cmd.options.command.empty()) std::abort();
    if (cmd.action == hvdrun::cli::Action::check && !cmd.options.command.empty()) std::abort();
    if (!cmd.options.hosts.empty()) hvdrun::fuzz::check_hosts(cmd.options.hosts);
  } catch (const hvdrun::UsageError& e) {
    hvdrun::fuzz::check_message(e.what());
  }
  return 0;
}
