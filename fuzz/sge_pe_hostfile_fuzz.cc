// libFuzzer target for the PE_HOSTFILE parser: any input either parses into valid hosts (or
// counts) or throws UsageError with a one-line message. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "fuzz/check_hosts.h"
#include "hostfile/scheduler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    hvdrun::fuzz::check_hosts(hvdrun::hostfile::parse_sge_pe_hostfile_text(text, "pe_hostfile"));
  } catch (const hvdrun::UsageError& e) {
    hvdrun::fuzz::check_message(e.what());
  }
  return 0;
}
