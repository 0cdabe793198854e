// libFuzzer target for the hostfile parser: any input either parses into valid hosts
// that place without error, or throws UsageError with a one-line message naming the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "fuzz/check_hosts.h"
#include "hostfile/hosts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto hosts = hvdrun::hostfile::parse_hostfile_text(text, "fuzz.hosts");
    hvdrun::fuzz::check_hosts(hosts);
  } catch (const hvdrun::UsageError& e) {
    std::string_view msg = e.what();
    if (msg.substr(0, 10) != "fuzz.hosts") std::abort();
    hvdrun::fuzz::check_message(msg);
  }
  return 0;
}
