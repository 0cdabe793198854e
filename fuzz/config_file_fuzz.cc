// libFuzzer target for the configuration files hvdrun reads: horovodrun's --config-file
// (the YAML subset and its schema, compat/horovod_config.h) and --env-file
// (cli/env_options.h). Any text either yields entries (every one NAME=VALUE with a name of
// letters, digits and '_') or throws UsageError with one line that starts with the file's
// name and a line number: never a crash, a hang or an entry that is not a variable.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/env_options.h"
#include "common/error.h"
#include "compat/horovod_config.h"
#include "fuzz/check_hosts.h"

namespace {

void check_entries(const std::vector<std::string>& entries) {
  for (const std::string& e : entries) {
    const auto eq = e.find('=');
    if (eq == 0 || eq == std::string::npos) std::abort();
    for (char c : std::string_view(e).substr(0, eq)) {
      const bool ok =
          (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      if (!ok) std::abort();
    }
  }
}

void check_error(const hvdrun::UsageError& e, std::string_view file) {
  const std::string_view msg = e.what();
  if (msg.substr(0, file.size()) != file) std::abort();
  hvdrun::fuzz::check_message(msg, hvdrun::fuzz::MessageRule::one_line);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // With and without a tuning flag on the command line (which drops the file's value).
  const std::vector<std::pair<std::string, std::string>> none, flag{{"cycle-time-ms", "5"}};
  for (const auto* given : {&none, &flag}) {
    try {
      check_entries(hvdrun::compat::horovod_config_env(text, "fuzz.yaml", *given));
    } catch (const hvdrun::UsageError& e) {
      check_error(e, "fuzz.yaml:");
    }
  }
  try {
    check_entries(hvdrun::cli::parse_env_file(text, "fuzz.env"));
  } catch (const hvdrun::UsageError& e) {
    check_error(e, "fuzz.env:");
  }
  return 0;
}
