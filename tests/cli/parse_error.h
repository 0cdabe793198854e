// The cli tests' way to read a refusal: the message parse_command_line throws for `args`.
#pragma once

#include <string>
#include <vector>

#include "cli/options.h"
#include "common/error.h"

namespace hvdrun::testing {

/// The UsageError's message for `args`, or "<no error>" when they parse.
inline std::string error_of(const std::vector<std::string>& args) {
  try {
    hvdrun::cli::parse_command_line(args);
  } catch (const hvdrun::UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace hvdrun::testing
