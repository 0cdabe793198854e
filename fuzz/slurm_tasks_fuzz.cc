// libFuzzer target for the SLURM_TASKS_PER_NODE parser: any input either parses into valid hosts
// (or counts) or throws UsageError with a one-line message. Anything else is a bug.
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
    for (int c : hvdrun::hostfile::expand_slurm_tasks_per_node(text)) {
      if (c < 0) std::abort();
    }
  } catch (const hvdrun::UsageError& e) {
    hvdrun::fuzz::check_message(e.what());
  }
  return 0;
}
