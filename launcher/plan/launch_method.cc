// --launcher values and exec: command lines.
#include "launcher/plan/launch_method.h"

#include "common/error.h"
#include "common/quote.h"

namespace hvdrun::launcher {
namespace {

// A word as a POSIX shell reads it back: bare when safe, else in single quotes. Braces
// are safe only in what is shown (`{host}` in a message): bash expands `{a,b}`.
std::string shell_word(const std::string& w, bool for_display = true) {
  constexpr const char* kSafe =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./-_";
  const std::string safe_set = std::string(kSafe) + (for_display ? "{}" : "");
  const bool safe = !w.empty() && w.find_first_not_of(safe_set) == std::string::npos;
  if (safe) return w;
  std::string out = "'";
  for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

constexpr const char* kForms = "auto, ssh, slurm or exec:COMMAND (e.g. exec:docker exec -i {host})";

}  // namespace

std::vector<std::string> split_command_words(std::string_view command) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote_char = 0;
  for (std::size_t i = 0; i < command.size(); ++i) {
    const char c = command[i];
    if (quote_char != 0) {
      if (c == quote_char) {
        quote_char = 0;
      } else if (c == '\\' && quote_char == '"' && i + 1 < command.size() &&
                 (command[i + 1] == '"' || command[i + 1] == '\\')) {
        word += command[++i];
      } else {
        word += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'' || c == '"') {
      quote_char = c;
    } else if (c == '\\' && i + 1 < command.size()) {
      word += command[++i];
    } else {
      word += c;
    }
  }
  if (quote_char != 0) {
    throw UsageError("--launcher: unclosed " + std::string(1, quote_char) + " in " +
                     quote(command) + "; close the quote");
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

LauncherChoice parse_launcher(std::string_view text) {
  LauncherChoice c;
  if (text == "auto") return c;
  if (text == "ssh") {
    c.kind = LauncherChoice::ssh;
    return c;
  }
  if (text == "slurm") {
    c.kind = LauncherChoice::slurm;
    return c;
  }
  if (text.substr(0, 5) == "exec:") {
    c.kind = LauncherChoice::exec;
    c.exec_argv = split_command_words(text.substr(5));
    if (c.exec_argv.empty()) {
      throw UsageError(
          "--launcher exec: needs a command after 'exec:'; expected e.g. "
          "--launcher 'exec:docker exec -i {host}'");
    }
    bool has_host = false;
    for (const auto& w : c.exec_argv) has_host = has_host || w.find("{host}") != std::string::npos;
    if (!has_host) {
      throw UsageError("--launcher " + quote(text) +
                       ": the command has no {host}; put {host} where the host name goes, as in "
                       "exec:docker exec -i {host}");
    }
    return c;
  }
  throw UsageError("bad value " + quote(text) + " for --launcher; expected " + kForms);
}

std::string to_string(const LauncherChoice& choice) {
  switch (choice.kind) {
    case LauncherChoice::automatic:
      return "auto";
    case LauncherChoice::ssh:
      return "ssh";
    case LauncherChoice::slurm:
      return "slurm";
    case LauncherChoice::join:
      return "join";
    case LauncherChoice::exec:
      break;
  }
  std::string out = "exec:";
  for (std::size_t i = 0; i < choice.exec_argv.size(); ++i) {
    out += (i ? " " : "") + shell_word(choice.exec_argv[i]);
  }
  return out;
}

std::string shell_line(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + shell_word(w, false);
  return out;
}

bool joins_its_arguments(const std::vector<std::string>& exec_argv) {
  if (exec_argv.empty()) return false;
  const std::string& program = exec_argv.front();
  const std::string_view base = std::string_view(program).substr(program.rfind('/') + 1);
  return base == "ssh";
}

std::vector<std::string> exec_command_for(const std::vector<std::string>& exec_argv,
                                          const std::string& host,
                                          const std::vector<std::string>& agent_command) {
  // {command} and ssh get the agent command as one shell line, which survives the shell
  // on the far side; other commands (docker exec, kubectl exec --) run their arguments as
  // they are, so those get its words.
  const std::string line = shell_line(agent_command);
  bool placed = false;
  std::vector<std::string> argv;
  argv.reserve(exec_argv.size() + agent_command.size());
  for (std::string w : exec_argv) {
    for (auto pos = w.find("{host}"); pos != std::string::npos; pos = w.find("{host}", pos)) {
      w.replace(pos, 6, host);
      pos += host.size();
    }
    for (auto pos = w.find(kCommandPlaceholder); pos != std::string::npos;
         pos = w.find(kCommandPlaceholder, pos)) {
      w.replace(pos, kCommandPlaceholder.size(), line);
      pos += line.size();
      placed = true;
    }
    argv.push_back(std::move(w));
  }
  if (placed) return argv;
  if (joins_its_arguments(exec_argv)) {
    argv.push_back(line);
  } else {
    argv.insert(argv.end(), agent_command.begin(), agent_command.end());
  }
  return argv;
}

}  // namespace hvdrun::launcher
