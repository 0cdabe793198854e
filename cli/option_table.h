// The table of hvdrun's options (names, argument, help line, which subcommands take
// it) with horovodrun's tuning flags (compat/horovod_flags.h) in it, and the --help text
// made from it: the parser (options.cc) and --help read the same table, so they cannot
// disagree.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::cli {

// Which command line an option belongs to.
enum Mode : unsigned {
  kRun = 1,    // hvdrun [run] ...
  kCheck = 2,  // hvdrun check ...
  kAgent = 4,  // hvdrun agent ...
  kAll = kRun | kCheck | kAgent,
};

/// One option of the table.
struct OptSpec {
  /// Long name without dashes; Boost's key.
  const char* name;
  /// Short option letter, or 0.
  char short_name;
  /// Whether the documented form is single-dash long (`-np`).
  bool single_dash;
  /// Argument placeholder, or nullptr for a switch.
  const char* arg;
  /// Section in --help.
  const char* group;
  /// One-line description for --help.
  const char* help;
  /// Modes that accept it.
  unsigned modes;
};

/// Every option, in --help order: hvdrun's own, with the Horovod tuning flags before the
/// "Other" group.
const std::vector<OptSpec>& options();

/// The option named `name` (long name without dashes); std::logic_error when none is.
const OptSpec& spec_named(std::string_view name);

/// How the option is named to the user in messages: its documented primary form.
std::string shown(const OptSpec& s);

}  // namespace hvdrun::cli
