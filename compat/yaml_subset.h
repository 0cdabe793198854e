// The part of YAML that horovodrun's --config-file uses: top-level `key: value` lines and
// sections holding one level of indented `key: value` lines, plain or quoted scalars and
// `#` comments. Anything beyond that (lists, flow collections, block scalars, anchors,
// tags, deeper nesting, several documents) is refused with the file and line rather than
// half-read, and so are tabs in indentation and repeated keys, which PyYAML would take
// silently. Pure text in, entries out: the caller reads the file and gives the schema.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::compat {

/// One `key: value` line of the file.
struct YamlEntry {
  /// The section it is indented under; empty for a top-level key.
  std::string section;
  /// The key.
  std::string key;
  /// The scalar with quotes removed and escapes resolved; empty for a null value.
  std::string value;
  /// Whether the value was written in quotes (a string, never a number or a boolean).
  bool quoted = false;
  /// Whether the value is null (nothing after the colon, `~` or `null`).
  bool null = false;
  /// Whether this top-level key opened a section (indented lines follow it).
  bool is_section = false;
  /// Its 1-based line in the file.
  int line = 0;
};

/// The entries of `text` in file order, a section's header before its keys. `file` names
/// the file in messages. Throws UsageError as "FILE:LINE: what; what to do".
std::vector<YamlEntry> parse_yaml_subset(std::string_view text, const std::string& file);

}  // namespace hvdrun::compat
