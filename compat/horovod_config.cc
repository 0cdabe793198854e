// horovodrun's config file (see horovod_config.h). Each key maps to the variable
// horovodrun's launcher sets from it (horovod/runner/common/util/config_parser.py), with
// the value converted the same way: megabytes to bytes, booleans to 1 or 0.
#include "compat/horovod_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"
#include "common/quote.h"
#include "common/whole_number.h"
#include "compat/horovod_flags.h"
#include "compat/yaml_subset.h"
#include "hostfile/host_file.h"

namespace hvdrun::compat {
namespace {

// How a key's value becomes its variable's.
enum class Type {
  megabytes,  // whole MiB, set in bytes
  whole,      // whole number >= 0
  decimal,    // decimal number >= 0
  fraction,   // decimal number in [0, 1]
  text,       // non-empty text (a file name)
  boolean,    // true: 1, false: 0
  negated,    // true: 0, false: 1 (stall_check.enabled, logging.with_timestamp)
  only_true,  // true: 1, false: nothing (autotune.enabled)
  level,      // Horovod's log level
  no_effect,  // boolean, set as horovodrun sets it, with no effect under hvdrun
};

// What else must hold for a key to take effect, as in horovodrun.
enum class Gate { none, autotune, timeline };

struct ConfigKey {
  std::string_view section;
  std::string_view key;
  const char* variable;
  Type type;
  Gate gate;
  const char* example;
};

const std::array kKeys = {
    ConfigKey{"params", "fusion_threshold_mb", "HOROVOD_FUSION_THRESHOLD", Type::megabytes,
              Gate::none, "64"},
    ConfigKey{"params", "cycle_time_ms", "HOROVOD_CYCLE_TIME", Type::decimal, Gate::none, "3.5"},
    ConfigKey{"params", "cache_capacity", "HOROVOD_CACHE_CAPACITY", Type::whole, Gate::none,
              "1024"},
    ConfigKey{"params", "hierarchical_allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE", Type::boolean,
              Gate::none, "true"},
    ConfigKey{"params", "hierarchical_allgather", "HOROVOD_HIERARCHICAL_ALLGATHER", Type::boolean,
              Gate::none, "true"},
    ConfigKey{"params", "torus_allreduce", "HOROVOD_TORUS_ALLREDUCE", Type::boolean, Gate::none,
              "true"},
    ConfigKey{"autotune", "enabled", "HOROVOD_AUTOTUNE", Type::only_true, Gate::none, "true"},
    ConfigKey{"autotune", "log_file", "HOROVOD_AUTOTUNE_LOG", Type::text, Gate::autotune,
              "autotune.csv"},
    ConfigKey{"autotune", "warmup_samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", Type::whole,
              Gate::autotune, "3"},
    ConfigKey{"autotune", "steps_per_sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", Type::whole,
              Gate::autotune, "10"},
    ConfigKey{"autotune", "bayes_opt_max_samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
              Type::whole, Gate::autotune, "20"},
    ConfigKey{"autotune", "gaussian_process_noise", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
              Type::fraction, Gate::autotune, "0.8"},
    ConfigKey{"timeline", "filename", "HOROVOD_TIMELINE", Type::text, Gate::none, "timeline.json"},
    ConfigKey{"timeline", "mark_cycles", "HOROVOD_TIMELINE_MARK_CYCLES", Type::boolean,
              Gate::timeline, "true"},
    ConfigKey{"stall_check", "enabled", "HOROVOD_STALL_CHECK_DISABLE", Type::negated, Gate::none,
              "true"},
    ConfigKey{"stall_check", "warning_time_seconds", "HOROVOD_STALL_CHECK_TIME_SECONDS",
              Type::whole, Gate::none, "60"},
    ConfigKey{"stall_check", "shutdown_time_seconds", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
              Type::whole, Gate::none, "0"},
    ConfigKey{"library_options", "mpi_threads_disable", "HOROVOD_MPI_THREADS_DISABLE",
              Type::no_effect, Gate::none, "true"},
    ConfigKey{"library_options", "num_nccl_streams", "HOROVOD_NUM_NCCL_STREAMS", Type::whole,
              Gate::none, "1"},
    ConfigKey{"library_options", "thread_affinity", "HOROVOD_THREAD_AFFINITY", Type::whole,
              Gate::none, "0"},
    ConfigKey{"library_options", "gloo_timeout_seconds", "HOROVOD_GLOO_TIMEOUT_SECONDS",
              Type::whole, Gate::none, "30"},
    ConfigKey{"logging", "level", "HOROVOD_LOG_LEVEL", Type::level, Gate::none, "INFO"},
    ConfigKey{"logging", "with_timestamp", "HOROVOD_LOG_HIDE_TIME", Type::negated, Gate::none,
              "false"},
    // Not read by horovodrun (whose own test config has it): honoured for what it says.
    ConfigKey{"logging", "hide_timestamp", "HOROVOD_LOG_HIDE_TIME", Type::boolean, Gate::none,
              "true"},
};

constexpr std::string_view kTopLevel =
    "controller, params, autotune, timeline, stall_check, library_options, logging";
constexpr std::size_t kMaxConfigBytes = 1 << 20;

std::string keys_of(std::string_view section) {
  std::string out;
  for (const auto& k : kKeys) {
    if (k.section != section) continue;
    if (!out.empty()) out += ", ";
    out += k.key;
  }
  return out;
}

bool is_section(std::string_view name) {
  return std::any_of(kKeys.begin(), kKeys.end(),
                     [&](const ConfigKey& k) { return k.section == name; });
}

// One value found in the file, ready to set.
struct Setting {
  const ConfigKey* key;
  std::string value;  // empty: nothing to set (autotune.enabled: false)
  int line;
};

class Converter {
 public:
  explicit Converter(const std::string& file) : file_(file) {}

  [[noreturn]] void fail(const YamlEntry& e, const std::string& what) const {
    throw UsageError(file_ + ":" + std::to_string(e.line) + ": " + what);
  }

  // The top-level `controller`: gloo is what hvdrun always runs; MPI it has not.
  void controller(const YamlEntry& e) const {
    if (e.is_section) fail(e, "controller takes a value, not a section; write controller: gloo");
    if (e.null) return;
    std::string v = e.value;
    std::transform(v.begin(), v.end(), v.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (v == "gloo") return;
    if (v == "mpi") {
      fail(e,
           "controller: mpi is not supported: hvdrun has no MPI controller and runs Horovod "
           "programs in gloo mode; write controller: gloo or remove the line");
    }
    fail(e, "bad value " + quote(e.value) + " for controller; expected gloo");
  }

  Setting setting(const YamlEntry& e) const {
    const auto* k = std::find_if(kKeys.begin(), kKeys.end(), [&](const ConfigKey& c) {
      return c.section == e.section && c.key == e.key;
    });
    if (k == kKeys.end()) {
      fail(e, "unknown key " + quote(e.key) + " in section " + e.section + "; expected one of " +
                  keys_of(e.section) + " (see hvdrun(1), CONFIGURATION FILE)");
    }
    return Setting{k, value(*k, e), e.line};
  }

 private:
  [[noreturn]] void bad(const ConfigKey& k, const YamlEntry& e, const std::string& expected) const {
    fail(e, "bad value " + quote(e.value) + (e.quoted ? " (quoted)" : "") + " for " +
                std::string(k.section) + "." + std::string(k.key) + "; expected " + expected +
                ", as in '" + std::string(k.key) + ": " + k.example + "'");
  }

  std::string value(const ConfigKey& k, const YamlEntry& e) const {
    const std::string& v = e.value;
    switch (k.type) {
      case Type::megabytes:
      case Type::whole: {
        const auto n = e.quoted ? std::nullopt : parse_whole_number(v, 0, 999999999);
        if (!n) bad(k, e, "a whole number from 0, without quotes");
        return k.type == Type::megabytes ? std::to_string(static_cast<long long>(*n) << 20)
                                         : std::to_string(*n);
      }
      case Type::decimal:
      case Type::fraction: {
        const auto x = e.quoted ? std::nullopt : parse_decimal(v);
        if (!x || (k.type == Type::fraction && *x > 1.0)) {
          bad(k, e, k.type == Type::fraction ? "a number from 0 to 1" : "a number from 0");
        }
        return v;
      }
      case Type::text:
        if (v.empty()) bad(k, e, "a non-empty file name");
        return v;
      case Type::level: {
        std::string up = v;
        std::transform(up.begin(), up.end(), up.begin(),
                       [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
        static const std::set<std::string> kLevels = {"TRACE",   "DEBUG", "INFO",
                                                      "WARNING", "ERROR", "FATAL"};
        if (!kLevels.count(up)) bad(k, e, "TRACE, DEBUG, INFO, WARNING, ERROR or FATAL");
        return v;
      }
      case Type::boolean:
      case Type::negated:
      case Type::only_true:
      case Type::no_effect:
        break;
    }
    const bool b = boolean(k, e);
    if (k.type == Type::only_true) return b ? "1" : "";
    return b != (k.type == Type::negated) ? "1" : "0";
  }

  // YAML 1.1's booleans, as PyYAML reads them.
  bool boolean(const ConfigKey& k, const YamlEntry& e) const {
    static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes",
                                                "YES",  "on",   "On",   "ON"};
    static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No",
                                                 "NO",    "off",   "Off",   "OFF"};
    if (!e.quoted && kTrue.count(e.value)) return true;
    if (!e.quoted && kFalse.count(e.value)) return false;
    bad(k, e, "true or false, without quotes");
  }

  const std::string& file_;
};

// The settings of the file, in file order; checks every key.
std::vector<Setting> settings_of(const std::vector<YamlEntry>& entries, const Converter& c) {
  std::vector<Setting> out;
  for (const auto& e : entries) {
    if (!e.section.empty()) {
      if (!e.null) out.push_back(c.setting(e));
    } else if (e.key == "controller") {
      c.controller(e);
    } else if (!is_section(e.key)) {
      c.fail(e, "unknown key " + quote(e.key) + "; expected " + std::string(kTopLevel) +
                    " (see hvdrun(1), CONFIGURATION FILE)");
    } else if (!e.is_section && !e.null) {
      c.fail(e, e.key + " is a section; put its keys on indented lines below '" + e.key +
                    ":', as in '  " + keys_of(e.key).substr(0, keys_of(e.key).find(',')) +
                    ": ...'");
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> horovod_config_env(
    std::string_view text, const std::string& file,
    const std::vector<std::pair<std::string, std::string>>& given) {
  const Converter c(file);
  const std::vector<Setting> settings = settings_of(parse_yaml_subset(text, file), c);
  const auto flag_given = [&](std::string_view name) {
    return std::any_of(given.begin(), given.end(), [&](const auto& g) { return g.first == name; });
  };
  const auto in_file = [&](std::string_view section, std::string_view key) {
    return std::any_of(settings.begin(), settings.end(), [&](const Setting& s) {
      return s.key->section == section && s.key->key == key && !s.value.empty();
    });
  };
  const bool autotune =
      (flag_given("autotune") || in_file("autotune", "enabled")) && !flag_given("no-autotune");
  const bool timeline = flag_given("timeline-filename") || in_file("timeline", "filename");
  std::set<std::string> on_command_line;
  for (const auto& entry : horovod_knob_env(given)) {
    on_command_line.insert(entry.substr(0, entry.find('=')));
  }
  std::vector<std::string> env;
  std::map<std::string_view, const Setting*> by_variable;
  for (const auto& s : settings) {
    auto [it, fresh] = by_variable.emplace(s.key->variable, &s);
    if (!fresh) {
      throw UsageError(file + ":" + std::to_string(s.line) + ": " + std::string(s.key->key) +
                       " and " + std::string(it->second->key->key) + " (line " +
                       std::to_string(it->second->line) + ") both set " + s.key->variable +
                       "; keep one");
    }
    if (s.value.empty() || on_command_line.count(s.key->variable)) continue;
    if ((s.key->gate == Gate::autotune && !autotune) ||
        (s.key->gate == Gate::timeline && !timeline)) {
      continue;
    }
    env.push_back(std::string(s.key->variable) + "=" + s.value);
  }
  return env;
}

std::vector<std::string> read_horovod_config(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& given) {
  const std::string text =
      hostfile::read_host_file(path, kMaxConfigBytes, [&](const std::string& what) {
        return UsageError("--config-file " + quote(path) + ": " + what +
                          "; expected a readable YAML file of Horovod settings");
      });
  return horovod_config_env(text, path, given);
}

}  // namespace hvdrun::compat
