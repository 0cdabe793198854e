// See log.h. The private logger is registered nowhere, so a program's own spdlog setup
// (a logger of any name, its default logger) neither sees nor changes it.
#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace hvdrun {

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> own = [] {
    // spdlog's registry is built here, under this function's own guard: every caller is
    // then ordered after its construction (spdlog's guard, inside the shared library, is
    // invisible to ThreadSanitizer).
    (void)spdlog::default_logger_raw();
    auto l = std::make_shared<spdlog::logger>(kLoggerName,
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_level(spdlog::level::info);
    return l;
  }();
  spdlog::logger* def = spdlog::default_logger_raw();
  if (def != nullptr && def->name() == kLoggerName) return *def;
  return *own;
}

}  // namespace hvdrun
