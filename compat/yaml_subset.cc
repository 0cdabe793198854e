// The YAML subset of horovodrun's config file (see yaml_subset.h).
#include "compat/yaml_subset.h"

#include <map>
#include <utility>

#include "common/error.h"
#include "common/quote.h"

namespace hvdrun::compat {
namespace {

constexpr std::string_view kShape =
    "hvdrun reads 'key: value' lines and sections of indented 'key: value' lines";

bool is_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

class LineParser {
 public:
  LineParser(const std::string& file, int line) : file_(file), line_(line) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(file_ + ":" + std::to_string(line_) + ": " + what);
  }

  // `content` (a line without its indentation) as a key and its value.
  YamlEntry entry(std::string_view content) const {
    if (content.front() == '-')
      fail("a list item; lists are not supported: " + std::string(kShape));
    if (std::string_view("[{?&*!|>%@`'\"").find(content.front()) != std::string_view::npos) {
      fail("unsupported YAML " + quote(content.substr(0, 1)) +
           " before a key: " + std::string(kShape));
    }
    size_t end = 0;
    while (end < content.size() && is_key_char(content[end])) ++end;
    if (end == content.size() || content[end] != ':' ||
        (end + 1 < content.size() && content[end + 1] != ' ' && content[end + 1] != '\t')) {
      fail("expected 'key: value', got " + quote(content) +
           "; a key has letters, digits, '_', "
           "'-' and '.', and a space follows its colon");
    }
    YamlEntry e;
    e.key = std::string(content.substr(0, end));
    e.line = line_;
    scalar(trim_left(content.substr(end + 1)), e);
    return e;
  }

 private:
  // The value after the colon: null, quoted or plain, then at most a comment.
  void scalar(std::string_view v, YamlEntry& e) const {
    if (v.empty() || v.front() == '#') {
      e.null = true;
      return;
    }
    if (v.front() == '\'' || v.front() == '"') {
      e.quoted = true;
      std::string_view rest = quoted(v, e.value);
      rest = trim_left(rest);
      if (!rest.empty() && rest.front() != '#') {
        fail("unexpected " + quote(rest) + " after the quoted value of " + quote(e.key) +
             "; put a comment after ' #'");
      }
      return;
    }
    if (std::string_view("[{&*!|>%@`").find(v.front()) != std::string_view::npos) {
      fail("unsupported YAML value " + quote(v) + " for " + quote(e.key) +
           " (lists, mappings, anchors, tags and block scalars are not read); write a plain "
           "or quoted scalar");
    }
    size_t comment = v.find(" #");
    if (comment == std::string_view::npos) comment = v.find("\t#");
    v = trim_right(v.substr(0, comment));
    if (v.find(": ") != std::string_view::npos || v.back() == ':') {
      fail("a value holds ': ' in " + quote(v) +
           "; nested mappings go on indented lines, and "
           "a value with ': ' needs quotes");
    }
    if (v == "~" || v == "null" || v == "Null" || v == "NULL") {
      e.null = true;
      return;
    }
    e.value = std::string(v);
  }

  // A single- or double-quoted scalar at the start of `v` into `out`; returns what follows
  // the closing quote.
  std::string_view quoted(std::string_view v, std::string& out) const {
    const char q = v.front();
    size_t i = 1;
    for (; i < v.size(); ++i) {
      const char c = v[i];
      if (c == q && q == '\'' && i + 1 < v.size() && v[i + 1] == '\'') {
        out.push_back('\'');
        ++i;
      } else if (c == q) {
        return v.substr(i + 1);
      } else if (c == '\\' && q == '"') {
        if (++i == v.size()) break;
        switch (v[i]) {
          case '\\':
          case '"':
          case '/':
            out.push_back(v[i]);
            break;
          case 'n':
            out.push_back('\n');
            break;
          case 't':
            out.push_back('\t');
            break;
          default:
            fail("unsupported escape " + quote(v.substr(i - 1, 2)) +
                 " in a double-quoted value; use \\\\, \\\", \\n or \\t, or single quotes");
        }
      } else {
        out.push_back(c);
      }
    }
    fail("the quoted value " + quote(v) + " does not end on its line; close the " +
         (q == '"' ? std::string("\"") : std::string("'")) +
         " (values spanning lines are not read)");
  }

  const std::string& file_;
  int line_;
};

// Where a section's lines stand: the top-level entry they belong to and their indentation.
struct OpenSection {
  bool open = false;  // the last top-level key may have indented lines below it
  size_t header = 0;  // index of its entry
  int indent = -1;    // -1 until its first line
};

}  // namespace

std::vector<YamlEntry> parse_yaml_subset(std::string_view text, const std::string& file) {
  std::vector<YamlEntry> out;
  std::map<std::pair<std::string, std::string>, int> seen;
  OpenSection open;
  int line_no = 0;
  while (!text.empty() || line_no == 0) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const LineParser p(file, line_no);
    size_t indent = 0;
    while (indent < line.size() && (line[indent] == ' ' || line[indent] == '\t')) {
      if (line[indent] == '\t') p.fail("a tab in the indentation; YAML indents with spaces only");
      ++indent;
    }
    const std::string_view content = trim_right(line.substr(indent));
    if (content.empty() || content.front() == '#') continue;
    if (indent == 0 && content == "---" && out.empty()) continue;
    if (indent == 0 && (content == "---" || content == "...")) {
      p.fail("a second YAML document; hvdrun reads one document per file");
    }
    YamlEntry e = p.entry(content);
    if (indent == 0) {
      open = OpenSection{e.null, out.size(), -1};
    } else {
      if (!open.open) {
        p.fail("unexpected indentation before " + quote(e.key) +
               "; indent only the keys of a section, under a line such as 'params:'");
      }
      if (open.indent < 0) open.indent = static_cast<int>(indent);
      if (static_cast<int>(indent) != open.indent) {
        p.fail(static_cast<int>(indent) > open.indent
                   ? "nesting deeper than one section; " + std::string(kShape)
                   : "indentation of " + quote(e.key) +
                         " differs from the section's first key; indent them alike");
      }
      YamlEntry& header = out[open.header];
      header.is_section = true;
      header.null = false;
      e.section = header.key;
    }
    auto [it, fresh] = seen.emplace(std::make_pair(e.section, e.key), line_no);
    if (!fresh) {
      p.fail(quote(e.section.empty() ? e.key : e.section + "." + e.key) +
             " is given twice (lines " + std::to_string(it->second) + " and " +
             std::to_string(line_no) + "); keep one");
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace hvdrun::compat
