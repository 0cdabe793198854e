// `hvdrun check`: run the preflight on the hosts of the command line and print one table
// (or JSON) with every host's verdict, latency and fix.
#pragma once

#include <string>

#include "launcher/options.h"
#include "ssh/preflight.h"

namespace hvdrun::ssh {

/// Runs the preflight with the real libssh2 connector and prints the report to stdout
/// (JSON with options.json). Returns 0 when every host is ok, 255 otherwise. The
/// expected remote version is the first line of `<this binary> --version` (LaunchError
/// when that cannot be run). A malformed ssh_config throws UsageError (exit 2).
int run_check(const launcher::LaunchOptions& options);

/// Same, with the version string every host's hvdrun must print.
int run_check(const launcher::LaunchOptions& options, const std::string& expected_version);

/// The table: one row per host (HOST, ADDRESS, VERDICT, LATENCY, DETAIL) with a
/// `fix:` line under every bad host, then a summary line.
std::string render_table(const PreflightReport& report);

/// The same report as one JSON object: {"ok": bool, "elapsed_ms": n, "hosts": [{"host",
/// "local", "address", "verdict", "latency_ms", "detail", "fix"}]}.
std::string render_json(const PreflightReport& report);

/// The first line this executable prints for `--version` (run as a child process);
/// empty if it cannot be run.
std::string local_version_line();

}  // namespace hvdrun::ssh
