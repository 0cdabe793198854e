// horovodrun's tuning flags and the variables they set, as its launcher's config parser
// sets them, so a program sees the same environment under either launcher.
#include "compat/horovod_flags.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>

#include "common/error.h"
#include "common/quote.h"
#include "common/whole_number.h"

namespace hvdrun::compat {
namespace {

const std::array kKnobs = {
    HorovodKnob{"gloo", nullptr, "accepted: ranks always use Horovod's gloo mode", nullptr,
                Knob::accepted},
    HorovodKnob{"disable-cache", nullptr, "accepted: hvdrun keeps no check cache", nullptr,
                Knob::accepted},
    HorovodKnob{"fusion-threshold-mb", "MB", "HOROVOD_FUSION_THRESHOLD (in MiB)",
                "HOROVOD_FUSION_THRESHOLD", Knob::megabytes},
    HorovodKnob{"cycle-time-ms", "MS", "HOROVOD_CYCLE_TIME", "HOROVOD_CYCLE_TIME", Knob::decimal},
    HorovodKnob{"cache-capacity", "N", "HOROVOD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY",
                Knob::whole},
    HorovodKnob{"hierarchical-allreduce", nullptr, "HOROVOD_HIERARCHICAL_ALLREDUCE=1",
                "HOROVOD_HIERARCHICAL_ALLREDUCE", Knob::one},
    HorovodKnob{"no-hierarchical-allreduce", nullptr, "HOROVOD_HIERARCHICAL_ALLREDUCE=0",
                "HOROVOD_HIERARCHICAL_ALLREDUCE", Knob::zero},
    HorovodKnob{"hierarchical-allgather", nullptr, "HOROVOD_HIERARCHICAL_ALLGATHER=1",
                "HOROVOD_HIERARCHICAL_ALLGATHER", Knob::one},
    HorovodKnob{"no-hierarchical-allgather", nullptr, "HOROVOD_HIERARCHICAL_ALLGATHER=0",
                "HOROVOD_HIERARCHICAL_ALLGATHER", Knob::zero},
    HorovodKnob{"torus-allreduce", nullptr, "HOROVOD_TORUS_ALLREDUCE=1", "HOROVOD_TORUS_ALLREDUCE",
                Knob::one},
    HorovodKnob{"no-torus-allreduce", nullptr, "HOROVOD_TORUS_ALLREDUCE=0",
                "HOROVOD_TORUS_ALLREDUCE", Knob::zero},
    HorovodKnob{"autotune", nullptr, "HOROVOD_AUTOTUNE=1", "HOROVOD_AUTOTUNE", Knob::one},
    HorovodKnob{"no-autotune", nullptr, "HOROVOD_AUTOTUNE=0 (the autotune settings unset)",
                "HOROVOD_AUTOTUNE", Knob::zero},
    HorovodKnob{"autotune-log-file", "FILE", "HOROVOD_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG",
                Knob::text},
    HorovodKnob{"autotune-warmup-samples", "N", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES",
                "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", Knob::whole},
    HorovodKnob{"autotune-steps-per-sample", "N", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",
                "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", Knob::whole},
    HorovodKnob{"autotune-bayes-opt-max-samples", "N", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", Knob::whole},
    HorovodKnob{"autotune-gaussian-process-noise", "X",
                "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, 0..1",
                "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", Knob::fraction},
    HorovodKnob{"timeline-filename", "FILE", "HOROVOD_TIMELINE", "HOROVOD_TIMELINE", Knob::text},
    HorovodKnob{"timeline-mark-cycles", nullptr, "HOROVOD_TIMELINE_MARK_CYCLES=1",
                "HOROVOD_TIMELINE_MARK_CYCLES", Knob::one},
    HorovodKnob{"no-timeline-mark-cycles", nullptr, "HOROVOD_TIMELINE_MARK_CYCLES=0",
                "HOROVOD_TIMELINE_MARK_CYCLES", Knob::zero},
    HorovodKnob{"no-stall-check", nullptr, "HOROVOD_STALL_CHECK_DISABLE=1",
                "HOROVOD_STALL_CHECK_DISABLE", Knob::one},
    HorovodKnob{"stall-check", nullptr, "HOROVOD_STALL_CHECK_DISABLE=0",
                "HOROVOD_STALL_CHECK_DISABLE", Knob::zero},
    HorovodKnob{"stall-check-warning-time-seconds", "SEC", "HOROVOD_STALL_CHECK_TIME_SECONDS",
                "HOROVOD_STALL_CHECK_TIME_SECONDS", Knob::whole},
    HorovodKnob{"stall-check-shutdown-time-seconds", "SEC", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
                "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", Knob::whole},
    HorovodKnob{"num-nccl-streams", "N", "HOROVOD_NUM_NCCL_STREAMS", "HOROVOD_NUM_NCCL_STREAMS",
                Knob::whole},
    HorovodKnob{"thread-affinity", "N", "HOROVOD_THREAD_AFFINITY", "HOROVOD_THREAD_AFFINITY",
                Knob::whole},
    HorovodKnob{"gloo-timeout-seconds", "SEC", "HOROVOD_GLOO_TIMEOUT_SECONDS",
                "HOROVOD_GLOO_TIMEOUT_SECONDS", Knob::whole},
    HorovodKnob{"tcp", nullptr, "NCCL_IB_DISABLE=1 (TCP only)", "NCCL_IB_DISABLE", Knob::one},
    HorovodKnob{"log-without-timestamp", nullptr, "HOROVOD_LOG_HIDE_TIME=1",
                "HOROVOD_LOG_HIDE_TIME", Knob::one},
    HorovodKnob{"log-with-timestamp", nullptr, "HOROVOD_LOG_HIDE_TIME=0", "HOROVOD_LOG_HIDE_TIME",
                Knob::zero},
    HorovodKnob{"log-hide-timestamp", nullptr, "old name of --log-without-timestamp",
                "HOROVOD_LOG_HIDE_TIME", Knob::one},
    HorovodKnob{"no-log-hide-timestamp", nullptr, "old name of --log-with-timestamp",
                "HOROVOD_LOG_HIDE_TIME", Knob::zero},
};

// horovodrun flags hvdrun does not take, with what to do instead.
const std::array<std::pair<std::string_view, std::string_view>, 6> kRefused = {{
    {"--mpi", "hvdrun has no MPI controller; drop --mpi (Horovod programs run in gloo mode)"},
    {"--jsrun", "hvdrun has no jsrun mode; drop --jsrun and give the hosts with -H"},
    {"--mpi-args", "hvdrun does not use mpirun; drop --mpi-args"},
    {"--binding-args", "hvdrun does not use mpirun; drop --binding-args"},
    {"--mpi-threads-disable", "hvdrun does not use MPI; drop --mpi-threads-disable"},
    {"--no-mpi-threads-disable", "hvdrun does not use MPI; drop --no-mpi-threads-disable"},
}};

// mpirun's flags that users bring along, with what to do instead. --oversubscribe is refused
// rather than taken: hvdrun runs one rank per slot, so the slots are where more ranks go.
constexpr std::string_view kOversubscribeAdvice =
    "hvdrun runs one rank per slot; give the hosts more slots (-H node1:8, or 'node1 slots=8' "
    "in the hostfile) to run more ranks on them";
const std::array<std::string_view, 2> kMpirunRefused = {"--oversubscribe", "-oversubscribe"};

// horovodrun's single-dash spellings.
const std::array<std::pair<std::string_view, std::string_view>, 3> kSingleDashAliases = {{
    {"-hostfile", "hostfile"},
    {"-cb", "check-build"},
    {"-prefix-timestamp", "prefix-output-with-timestamp"},
}};

// horovodrun's second long names of options hvdrun has under their first.
const std::array<std::pair<std::string_view, std::string_view>, 2> kLongAliases = {{
    {"min-num-proc", "min-np"},
    {"max-num-proc", "max-np"},
}};

}  // namespace

std::optional<double> parse_decimal(std::string_view text) {
  if (text.empty() || text.size() > 20 || text.front() == '.' || text.back() == '.') {
    return std::nullopt;
  }
  if (std::count(text.begin(), text.end(), '.') > 1) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(),
                   [](char c) { return c == '.' || (c >= '0' && c <= '9'); })) {
    return std::nullopt;
  }
  return std::stod(std::string(text));
}

std::span<const HorovodKnob> horovod_knobs() { return kKnobs; }

std::string_view horovod_refused_advice(std::string_view flag) {
  for (const auto& [name, advice] : kRefused) {
    if (name == flag) return advice;
  }
  return {};
}

std::string refused_flag_message(std::string_view flag) {
  if (auto advice = horovod_refused_advice(flag); !advice.empty()) {
    return "horovodrun's " + std::string(flag) + " is not supported: " + std::string(advice);
  }
  if (std::find(kMpirunRefused.begin(), kMpirunRefused.end(), flag) != kMpirunRefused.end()) {
    return "mpirun's " + std::string(flag) +
           " is not supported: " + std::string(kOversubscribeAdvice);
  }
  return {};
}

std::string_view horovod_single_dash_alias(std::string_view word) {
  for (const auto& [alias, option] : kSingleDashAliases) {
    if (alias == word) return option;
  }
  return {};
}

std::string_view horovod_long_alias(std::string_view name) {
  for (const auto& [alias, option] : kLongAliases) {
    if (alias == name) return option;
  }
  return {};
}

std::pair<int, int> horovod_cooldown_range(const std::string& text) {
  constexpr long kWeek = 86400L * 7;
  const auto sep = text.find_first_of(" ,");
  auto lo = parse_whole_number(text.substr(0, sep), 0, kWeek);
  auto hi =
      sep == std::string::npos ? std::nullopt : parse_whole_number(text.substr(sep + 1), 0, kWeek);
  if (!lo || !hi || *lo > *hi) {
    throw UsageError("bad value " + quote(text) +
                     " for --blacklist-cooldown-range; expected two whole numbers of seconds, "
                     "MIN then MAX (MIN <= MAX), as in --blacklist-cooldown-range 10 300");
  }
  return {static_cast<int>(*lo), static_cast<int>(*hi)};
}

std::vector<std::string> horovod_knob_env(
    const std::vector<std::pair<std::string, std::string>>& given) {
  std::vector<std::string> env;
  std::map<std::string_view, std::string_view> switch_by_variable;
  for (const auto& entry : given) {
    // Named references, not a structured binding: the lambda below captures the name.
    const std::string& name = entry.first;
    const std::string& value = entry.second;
    const auto* knob = std::find_if(kKnobs.begin(), kKnobs.end(),
                                    [&](const HorovodKnob& k) { return k.option == name; });
    if (knob == kKnobs.end() || knob->kind == Knob::accepted) continue;
    const std::string flag = "--" + std::string(knob->option);
    std::string out;
    switch (knob->kind) {
      case Knob::one:
      case Knob::zero: {
        auto [it, fresh] = switch_by_variable.emplace(knob->variable, knob->option);
        if (!fresh && it->second != knob->option) {
          throw UsageError("--" + std::string(it->second) + " and " + flag +
                           " cannot be used together; give one of them");
        }
        out = knob->kind == Knob::one ? "1" : "0";
        break;
      }
      case Knob::whole:
      case Knob::megabytes: {
        auto v = parse_whole_number(value, 0, 999999999);
        if (!v) {
          throw UsageError("bad value " + quote(value) + " for " + flag +
                           "; expected a whole number from 0, as in " + flag + " 64");
        }
        out = knob->kind == Knob::megabytes ? std::to_string(static_cast<long long>(*v) << 20)
                                            : std::to_string(*v);
        break;
      }
      case Knob::decimal:
      case Knob::fraction: {
        auto v = parse_decimal(value);
        if (!v || (knob->kind == Knob::fraction && *v > 1.0)) {
          throw UsageError("bad value " + quote(value) + " for " + flag + "; expected a number " +
                           (knob->kind == Knob::fraction ? "from 0 to 1, as in " + flag + " 0.8"
                                                         : "from 0, as in " + flag + " 2.5"));
        }
        out = value;
        break;
      }
      case Knob::text:
      case Knob::accepted:
        out = value;
        break;
    }
    env.push_back(std::string(knob->variable) + "=" + out);
  }
  return env;
}

}  // namespace hvdrun::compat
