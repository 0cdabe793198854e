// Keeps `hvdrun --help` and man/hvdrun.1 in step: the long options listed by --help must
// be exactly the options the man page documents with a .TP entry, the page's EXIT STATUS
// must list every status of common/exit_status.h, and groff must accept the page without
// warnings.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "cli/options.h"
#include "common/exit_status.h"
#include "tests/support/processes.h"

namespace {

bool is_word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

// Long options (and -np) in a piece of text: `--name` or `-np`, not inside a longer word.
void collect(const std::string& text, std::set<std::string>& out) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '-' || (i > 0 && is_word_char(text[i - 1]))) continue;
    size_t j = i + 1;
    if (j < text.size() && text[j] == '-') ++j;
    if (j >= text.size() || text[j] < 'a' || text[j] > 'z') continue;
    size_t end = j;
    while (end < text.size() && is_word_char(text[end])) ++end;
    std::string opt = text.substr(i, end - i);
    if (j == i + 2 || opt == "-np") out.insert(opt);
    i = end;
  }
}

std::set<std::string> options_in_help() {
  std::set<std::string> out;
  std::istringstream in(hvdrun::cli::help_text());
  std::string line;
  while (std::getline(in, line)) {
    // Option lines: two spaces, a dash, then the option column up to a two-space gap.
    if (line.rfind("  -", 0) != 0) continue;
    collect(line.substr(0, line.find("  ", 2)), out);
  }
  return out;
}

// Removes roff font escapes (\fB, \fI, \fR, \fP), zero-width escapes (\&, \|) and turns
// \- into -.
std::string unroff(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[i + 1];
      if (n == 'f' && i + 2 < s.size()) {
        i += 2;
        continue;
      }
      if (n == '&' || n == '|') {
        ++i;
        continue;
      }
      if (n == '-') {
        out += '-';
        ++i;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::set<std::string> options_in_man() {
  std::ifstream in(HVDRUN_SOURCE_DIR "/man/hvdrun.1");
  REQUIRE(in);
  std::set<std::string> out;
  std::string line;
  bool tag_next = false;
  while (std::getline(in, line)) {
    if (line == ".TP") {
      tag_next = true;
      continue;
    }
    if (!tag_next) continue;
    tag_next = false;
    // The tag line: a macro such as .B/.BI/.BR and its arguments; option tags start with
    // a dash.
    std::string text = unroff(line);
    auto space = text.find(' ');
    if (text.empty() || text[0] != '.' || space == std::string::npos) continue;
    std::string args = text.substr(space + 1);
    if (args.empty() || args[0] != '-') continue;
    collect(args, out);
  }
  return out;
}

}  // namespace

TEST_CASE("help text and the man page list the same options") {
  auto help = options_in_help();
  auto man = options_in_man();
  CHECK(help.count("--hosts") == 1);
  CHECK(help.count("-np") == 1);
  CHECK(help.size() >= 18);
  CHECK(help == man);
}

TEST_CASE("the man page's EXIT STATUS lists every status of the exit-status table") {
  std::ifstream in(HVDRUN_SOURCE_DIR "/man/hvdrun.1");
  REQUIRE(in);
  std::set<std::string> listed;  // the ".B N" lines after ".TP" in EXIT STATUS
  std::string line, previous;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind(".SH ", 0) == 0) in_section = line == ".SH EXIT STATUS";
    if (in_section && previous == ".TP" && line.rfind(".B ", 0) == 0) listed.insert(line.substr(3));
    previous = line;
  }
  REQUIRE(!listed.empty());
  std::set<std::string> table;
  for (int status : hvdrun::exit_status::kDocumented) table.insert(std::to_string(status));
  CHECK(listed == table);
}

TEST_CASE("the man page passes groff without warnings") {
  const std::string page = HVDRUN_SOURCE_DIR "/man/hvdrun.1";
  hvdrun::testing::CapturedProcess groff({"groff", "-man", "-ww", "-z", page});
  int rc = groff.wait();
  if (rc == 127 && groff.out.empty() && groff.err.empty()) {  // the exec failed
    WARN("groff not installed; man page not checked");
    return;
  }
  CHECK(groff.out.empty());
  CHECK(groff.err.empty());
  CHECK(rc == 0);
}
