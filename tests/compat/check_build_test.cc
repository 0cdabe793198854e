// The --check-build report: horovodrun's layout, and the facts this build knows.
#include <catch2/catch.hpp>
#include <string>

#include "compat/check_build.h"

namespace hvdrun::compat {

TEST_CASE("check_build_report lists backends and compat layers with [X]/[ ] marks") {
  const std::string report = check_build_report();
  INFO(report);
  CHECK(report.rfind("hvdrun v", 0) == 0);
  for (const char* section : {"Available Controllers:", "Available Tensor Operations:",
                              "Available Runtimes:", "Compatibility Layers:"}) {
    CHECK_THAT(report, Catch::Contains(section));
  }
  CHECK_THAT(report, Catch::Contains("    [X] Gloo 0."));
  CHECK_THAT(report, Catch::Contains("    [ ] MPI"));
  CHECK_THAT(report, Catch::Contains("[X] Horovod gloo mode"));
  CHECK_THAT(report, Catch::Contains("[X] torch.distributed env://"));
#ifdef HVDRUN_TEST_EXPECT_NCCL
  CHECK_THAT(report, Catch::Contains("    [X] NCCL 2."));
#endif
  // Every line is a heading, blank, or an [X]/[ ] entry.
  std::size_t start = 0;
  while (start < report.size()) {
    auto end = report.find('\n', start);
    const std::string line = report.substr(start, end - start);
    const bool ok = line.empty() || line.back() == ':' || line.rfind("    [X] ", 0) == 0 ||
                    line.rfind("    [ ] ", 0) == 0;
    CHECK(ok);
    start = end + 1;
  }
}

}  // namespace hvdrun::compat
