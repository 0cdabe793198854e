// horovodrun's --config-file: the YAML file of Horovod's runtime knobs (sections params,
// autotune, timeline, stall_check, library_options and logging, and the top-level
// controller), turned into the HOROVOD_* variables horovodrun's config parser sets from it
// in every rank. Flags on the command line win over the file, as in horovodrun. Every key
// and value is checked: an unknown key, a bad value or YAML this reader does not take is a
// UsageError naming the file and line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvdrun::compat {

/// The NAME=VALUE entries the config file `file` (its text `text`) sets in every rank, in
/// file order, without those whose variable a tuning flag in `given` sets (the command
/// line's flags, as for horovod_knob_env: name without dashes, value). As horovodrun,
/// autotune's settings apply only when autotune is on (in the file or by --autotune), and
/// timeline.mark_cycles only with a timeline file. Throws UsageError as "FILE:LINE: ...".
std::vector<std::string> horovod_config_env(
    std::string_view text, const std::string& file,
    const std::vector<std::pair<std::string, std::string>>& given);

/// horovod_config_env() over the file at `path`; an unreadable file is a UsageError
/// naming it.
std::vector<std::string> read_horovod_config(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& given);

}  // namespace hvdrun::compat
