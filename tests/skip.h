// HVDRUN_SKIP(why): Catch2 2.x has no SKIP. The case says why in the output and returns;
// the test binary then exits kSkipExitCode, which ctest shows as "Skipped", not "Passed".
#pragma once

namespace hvdrun::testing {

/// The exit code of a test binary whose cases passed but one was skipped.
inline constexpr int kSkipExitCode = 77;

/// Records that a test case was skipped (tests/catch_main.cc).
void note_skip();

}  // namespace hvdrun::testing

/// Ends the current test case as skipped, with `why` (a stream expression, as in Catch's
/// INFO: "text " << value) in the output. Only in a TEST_CASE body.
// NOLINTBEGIN(bugprone-macro-parentheses): `why` is a chain of << operands, like WARN's
#define HVDRUN_SKIP(why)            \
  do {                              \
    ::hvdrun::testing::note_skip(); \
    WARN("SKIPPED: " << why);       \
    return;                         \
  } while (false)
// NOLINTEND(bugprone-macro-parentheses)
