// libFuzzer target for the `-H` parser: any input either parses into valid hosts that
// place without error, or throws UsageError with a one-line message. Anything else (a
// crash, another exception, a multi-line message) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "fuzz/check_hosts.h"
#include "hostfile/hosts.h"
#include "hostfile/placement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto hosts = hvdrun::hostfile::parse_host_list(text);
    hvdrun::fuzz::check_hosts(hosts);
  } catch (const hvdrun::UsageError& e) {
    hvdrun::fuzz::check_message(e.what());
  }
  return 0;
}
