// libFuzzer target for the Slurm host list (SLURM_JOB_NODELIST): any input either parses into valid
// hosts (or counts) or throws UsageError with a one-line message. Anything else is a bug.
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
    auto names = hvdrun::hostfile::expand_slurm_hostlist(text);
    std::vector<hvdrun::hostfile::HostSlots> hosts;
    for (auto& n : names) hosts.push_back({n, 1});
    // Duplicates are allowed in a bare list; check_hosts wants them unique.
    if (hosts.size() <= 1) hvdrun::fuzz::check_hosts(hosts);
    for (auto& n : names) {
      if (n.empty()) std::abort();
      for (char c : n) {
        if (c == '[' || c == ']' || c == ',' || static_cast<unsigned char>(c) <= 0x20) std::abort();
      }
    }
  } catch (const hvdrun::UsageError& e) {
    hvdrun::fuzz::check_message(e.what());
  }
  return 0;
}
