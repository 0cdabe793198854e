// horovodrun's tuning flags (--fusion-threshold-mb, --autotune, ...), which hvdrun takes
// so that horovodrun command lines run unchanged: each sets the HOROVOD_* variable that
// horovodrun's launcher sets from it, in every rank. Also horovodrun's single-dash
// spellings and its --blacklist-cooldown-range value, and the horovodrun and mpirun flags
// hvdrun refuses, with what to do instead. The command-line parser (cli/) lists these
// flags from here.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvdrun::compat {

/// How a tuning flag's value becomes its variable's value.
enum class Knob {
  accepted,   ///< switch with no effect under hvdrun
  one,        ///< switch: VARIABLE=1
  zero,       ///< switch: VARIABLE=0
  whole,      ///< whole number >= 0, passed as written
  megabytes,  ///< whole number of MiB >= 0, passed in bytes
  decimal,    ///< decimal number >= 0 (e.g. 2.5), passed as written
  fraction,   ///< decimal number from 0 to 1
  text,       ///< any non-empty text (a file name)
};

/// One horovodrun tuning flag.
struct HorovodKnob {
  /// Long name without dashes ("fusion-threshold-mb").
  const char* option;
  /// Argument placeholder for --help, or nullptr for a switch.
  const char* arg;
  /// One-line description for --help.
  const char* help;
  /// The variable it sets, or nullptr (Knob::accepted).
  const char* variable;
  /// How the value becomes the variable's.
  Knob kind;
};

/// Every tuning flag, in --help order.
std::span<const HorovodKnob> horovod_knobs();

/// What to do instead of horovodrun's `flag` ("--mpi", ...) that hvdrun does not take;
/// empty when hvdrun does not refuse it.
std::string_view horovod_refused_advice(std::string_view flag);

/// The message for a flag of horovodrun or mpirun that hvdrun refuses ("horovodrun's --mpi
/// is not supported: ..."), with what to do instead; empty for any other flag.
std::string refused_flag_message(std::string_view flag);

/// The long option (without dashes) that horovodrun's single-dash spelling `word`
/// ("-hostfile", "-cb", "-prefix-timestamp") stands for; empty for any other word.
std::string_view horovod_single_dash_alias(std::string_view word);

/// The option (long name without dashes) that horovodrun's second long name `name`
/// ("min-num-proc", "max-num-proc") stands for; empty for any other name.
std::string_view horovod_long_alias(std::string_view name);

/// --blacklist-cooldown-range's value, "MIN MAX" or "MIN,MAX" in seconds, as (MIN, MAX).
/// Throws UsageError unless both are whole numbers of at most a week and MIN <= MAX.
std::pair<int, int> horovod_cooldown_range(const std::string& text);

/// A non-negative decimal number as horovodrun's float flags take it: digits with at most
/// one '.', e.g. "5", "0.8", "2.5"; nullopt for anything else.
std::optional<double> parse_decimal(std::string_view text);

/// The NAME=VALUE entries that the tuning flags in `given` (name without dashes, value;
/// "" for a switch) stand for, in the order given; other names are skipped. Throws
/// UsageError for a bad value or two switches that contradict each other.
std::vector<std::string> horovod_knob_env(
    const std::vector<std::pair<std::string, std::string>>& given);

}  // namespace hvdrun::compat
