// Elastic mode: the job runs in generations. A rank that fails or a host that is lost
// stops the generation (every rank on every host, as at any teardown); the hosts to blame
// are excluded for a cooldown; the discovery script is asked again; the next generation
// starts on the usable slots with HVDRUN_GENERATION one higher and a fresh rendezvous.
// Discovery is also polled while a generation runs, and slots that appear below --max-np
// restart it to grow. Limits: one restart budget for the whole job (--reset-limit), and
// fewer usable slots than --min-np end the job at once. docs/elastic.md has the picture.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/job/job.h"
#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// Hosts excluded after a failure, each until its cooldown ends: `min` the first time,
/// doubling with each further failure of the same host, up to `max`.
class Blacklist {
 public:
  using Clock = std::chrono::steady_clock;
  Blacklist(std::chrono::seconds min, std::chrono::seconds max) : min_(min), max_(max) {}
  /// `host` failed at `now`; returns when it may be used again.
  Clock::time_point add(const std::string& host, Clock::time_point now);
  /// Whether `host` is excluded at `now`.
  bool excluded(const std::string& host, Clock::time_point now) const;
  /// The hosts excluded at `now`, with the time each comes back.
  std::vector<std::pair<std::string, Clock::time_point>> active(Clock::time_point now) const;

 private:
  struct Entry {
    int strikes = 0;
    Clock::time_point until;
  };
  std::chrono::seconds min_;
  std::chrono::seconds max_;
  std::map<std::string, Entry> entries_;
};

/// What starts one generation: launch() in hvdrun, a stand-in in tests.
using GenerationLaunch = std::function<int(const LaunchOptions&, JobHooks)>;

/// Runs `options` (options.elastic.enabled()) in generations until one ends cleanly, an
/// interrupt stops it, the reset limit is passed or too few slots are left. Returns the
/// exit code: 0, the last failure's code, or 255 when no generation could start. Throws
/// UsageError for bad input found before the first generation.
int run_elastic(const LaunchOptions& options, const GenerationLaunch& launch);

/// The same with launch().
int run_elastic(const LaunchOptions& options);

}  // namespace hvdrun::launcher
