// `hvdrun check`: run the preflight on the hosts of the command line and print one table
// (or JSON) with every host's verdict, latency and fix.
#pragma once

#include <string>

#include "launcher/hosts/preflight.h"
#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// Runs the preflight with the real libssh2 connector and prints the report to stdout
/// (JSON with options.json); with options.topology, prints this machine's topology instead
/// and returns 0. Returns 0 when every host is ok, 255 otherwise. Every host's
/// hvdrun must print this build's version line (common/version.h). A malformed ssh_config
/// throws UsageError (exit 2).
int run_check(const LaunchOptions& options);

/// Same, with the version string every host's hvdrun must print.
int run_check(const LaunchOptions& options, const std::string& expected_version);

/// The table: one row per host (HOST, ADDRESS, VERDICT, LATENCY, DETAIL) with a
/// `fix:` line under every bad host, then a summary line. With `notes` (--verbose), a
/// `note:` line under every good host whose remote shell was slow to start hvdrun.
std::string render_table(const PreflightReport& report, bool notes = false);

/// The same report as one JSON object: {"ok": bool, "elapsed_ms": n, "hosts": [{"host",
/// "local", "address", "verdict", "latency_ms", "detail", "fix"}]}.
std::string render_json(const PreflightReport& report);

}  // namespace hvdrun::launcher
