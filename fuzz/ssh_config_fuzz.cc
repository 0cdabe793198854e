// libFuzzer target for the ssh_config parser: any text either parses (and every lookup
// then works) or throws UsageError with a one-line message naming the file. Inputs that
// mention Include are skipped so that the fuzzer never reads arbitrary files.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "fuzz/check_hosts.h"
#include "ssh/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("include") != std::string::npos) return 0;
  try {
    auto config = hvdrun::ssh::SshConfig::parse(text, "fuzz.config");
    for (const char* host : {"node1", "localhost", "10.0.0.1", "::1", "a.b-c_d", ""}) {
      config.lookup(host);
    }
  } catch (const hvdrun::UsageError& e) {
    std::string_view msg = e.what();
    if (msg.substr(0, 11) != "fuzz.config") std::abort();
    hvdrun::fuzz::check_message(msg, hvdrun::fuzz::MessageRule::one_line);
  }
  return 0;
}
