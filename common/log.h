// The logger hvdrun's libraries write their own lines to. In the launcher and the agent it
// is the default logger they configure (named "hvdrun", on stderr). Inside a training
// program (libhvdrun) the default logger belongs to the program and writes to its stdout,
// so there the libraries use a private logger on stderr instead: a rank's stdout carries
// only what the program itself prints.
#pragma once

#include <spdlog/logger.h>

namespace hvdrun {

/// The name under which the launcher and the agent register their default logger.
inline constexpr const char* kLoggerName = "hvdrun";

/// The default logger when it is hvdrun's own, else a private stderr logger (never stdout).
spdlog::logger& log();

}  // namespace hvdrun
