// A duration as people read it in messages: whole seconds without decimals ("30"),
// others with as many as they need ("0.25"). The caller adds the unit.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace hvdrun {

inline std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace hvdrun
