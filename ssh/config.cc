// ssh_config subset: tokenizing lines the way OpenSSH does (`Key value`, `Key=value`,
// double quotes, `#` comments), Host blocks with patterns, first-value-wins lookup and
// the resolution of a host into a Target.
#include "ssh/config.h"

#include <fcntl.h>
#include <glob.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/safe_path.h"

namespace hvdrun::ssh {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// ssh_config files are a few KiB; these caps keep `--ssh-config /dev/zero`, an Include of a
// device or of a huge file from reading without end. The total covers every Include.
constexpr std::size_t kMaxConfigFileBytes = 1024 * 1024;
constexpr std::size_t kMaxConfigTotalBytes = 16 * 1024 * 1024;

std::string mib(std::size_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }

// Reads `path` whole, at most kMaxConfigFileBytes and what is left of `budget`. `what`
// names the file in messages ("ssh config '/x'", "FILE:LINE: included file '/y'"), `hint`
// says what to do. A FIFO or device is read the same way, never waited on for ever:
// opening does not block, and reading stops at the cap.
std::string read_capped(const std::string& path, std::size_t& budget, const std::string& what,
                        const std::string& hint) {
  auto fail = [&](const std::string& why) -> UsageError {
    return UsageError(what + ": " + why + "; " + hint);
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) throw fail(std::string("cannot read it (") + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode))
    throw fail("cannot read it (" +
               std::string(std::strerror(S_ISDIR(st.st_mode) ? EISDIR : errno)) + ")");
  // As OpenSSH's "Bad owner or permissions": whoever can change it decides where the job's
  // connections go and which keys they trust. A device (/dev/null) is no one's file.
  if (!trusted_owner(st.st_uid))
    throw fail("belongs to another user, " + user_text(st.st_uid) +
               ", who could send your connections elsewhere");
  if (!S_ISCHR(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw fail(
        "is writable by other users, who could send your connections elsewhere (chmod "
        "go-w it)");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const std::size_t cap = std::min(kMaxConfigFileBytes, budget);
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail(std::string("cannot read it (") + std::strerror(errno) + ")");
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    if (data.size() > cap) {
      throw fail(cap == kMaxConfigFileBytes
                     ? "larger than " + mib(kMaxConfigFileBytes) + ", not an ssh_config file"
                     : "the configuration with its Includes exceeds " + mib(kMaxConfigTotalBytes));
    }
  }
  budget -= data.size();
  return data;
}

[[noreturn]] void malformed(const std::string& where, const std::string& what) {
  throw UsageError(where + ": " + what);
}

// Splits the arguments after the keyword: whitespace-separated words, "double quoted"
// words may hold spaces, an unquoted word starting with '#' ends the line.
std::vector<std::string> split_args(std::string_view s, const std::string& where) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size()) break;
    if (s[i] == '#') break;
    std::string word;
    if (s[i] == '"') {
      auto end = s.find('"', i + 1);
      if (end == std::string_view::npos) malformed(where, "unbalanced quote");
      word = std::string(s.substr(i + 1, end - i - 1));
      i = end + 1;
      if (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) {
        malformed(where, "unexpected text after a closing quote");
      }
    } else {
      auto start = i;
      while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) {
        if (s[i] == '"') malformed(where, "quote in the middle of a word");
        ++i;
      }
      word = std::string(s.substr(start, i - start));
    }
    words.push_back(std::move(word));
  }
  return words;
}

std::optional<int> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return std::nullopt;
  return std::stoi(s);
}

std::optional<StrictHostKeyChecking> parse_strict(const std::string& value) {
  auto v = lower(value);
  if (v == "yes" || v == "true" || v == "ask") return StrictHostKeyChecking::yes;
  if (v == "accept-new") return StrictHostKeyChecking::accept_new;
  if (v == "no" || v == "false" || v == "off") return StrictHostKeyChecking::no;
  return std::nullopt;
}

// Checks the value of a keyword hvdrun uses; returns the value to store.
std::string validate(const std::string& keyword, const std::vector<std::string>& args,
                     const std::string& where) {
  const std::string& value = args[0];
  bool single = true;
  if (keyword == "port") {
    auto port = parse_int(value);
    if (!port || *port < 1 || *port > 65535) {
      malformed(where, "Port must be a number from 1 to 65535, not '" + value + "'");
    }
  } else if (keyword == "connecttimeout") {
    if (lower(value) != "none" && !parse_int(value)) {
      malformed(where, "ConnectTimeout must be a number of seconds, not '" + value + "'");
    }
  } else if (keyword == "stricthostkeychecking") {
    if (!parse_strict(value)) {
      malformed(where,
                "StrictHostKeyChecking must be yes, accept-new, no or ask, not '" + value + "'");
    }
  } else if (keyword == "identitiesonly") {
    auto v = lower(value);
    if (v != "yes" && v != "no")
      malformed(where, "IdentitiesOnly must be yes or no, not '" + value + "'");
  } else if (keyword == "userknownhostsfile") {
    single = false;  // several files may be named; hvdrun uses the first
  } else if (keyword == "proxycommand" || keyword == "proxyjump") {
    std::string all;  // a command: every word, to show it as written
    for (const auto& a : args) all += (all.empty() ? "" : " ") + a;
    return all;
  }
  if (single && args.size() > 1) {
    malformed(where, "unexpected '" + args[1] + "' after the value of " + keyword);
  }
  return value;
}

constexpr std::string_view kKnownKeywords[] = {"hostname",
                                               "port",
                                               "user",
                                               "identityfile",
                                               "userknownhostsfile",
                                               "stricthostkeychecking",
                                               "connecttimeout",
                                               "identitiesonly",
                                               "proxycommand",
                                               "proxyjump"};

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative wildcard match with backtracking to the last '*'.
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  auto eq = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  };
  while (t < text.size()) {
    if (p < pattern.size() &&
        (pattern[p] == '?' || (pattern[p] != '*' && eq(pattern[p], text[t])))) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool host_matches(std::string_view host, const std::vector<std::string>& patterns) {
  bool matched = false;
  for (const auto& pattern : patterns) {
    if (!pattern.empty() && pattern[0] == '!') {
      if (glob_match(std::string_view(pattern).substr(1), host)) return false;
    } else if (glob_match(pattern, host)) {
      matched = true;
    }
  }
  return matched;
}

SshConfig SshConfig::parse(std::string_view text, const std::string& filename) {
  SshConfig config;
  config.filename_ = filename;
  config.blocks_.push_back(Block{});  // lines before the first Host apply to every host
  config.parse_into(text, filename, 0);
  return config;
}

void SshConfig::parse_into(std::string_view text, const std::string& filename, int depth) {
  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t i = 0;
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i == line.size() || line[i] == '#') {
      if (end == text.size()) break;
      continue;
    }
    const std::string where = filename + ":" + std::to_string(line_no);
    auto kstart = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i])) && line[i] != '=')
      ++i;
    const std::string written(line.substr(kstart, i - kstart));
    std::string keyword = lower(written);
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    if (i < line.size() && line[i] == '=') ++i;
    auto args = split_args(line.substr(i), where);
    if (keyword.empty()) malformed(where, "missing keyword before '='");
    if (args.empty()) malformed(where, "missing value for '" + written + "'");
    if (keyword == "host") {
      blocks_.push_back(Block{args, false, {}});
    } else if (keyword == "match") {
      // Match criteria are not evaluated: the block's settings apply to no host.
      blocks_.push_back(Block{{}, true, {}});
    } else if (keyword == "include") {
      include(args, where, depth);
    } else if (std::find(std::begin(kKnownKeywords), std::end(kKnownKeywords), keyword) !=
               std::end(kKnownKeywords)) {
      auto value = validate(keyword, args, where);
      blocks_.back().entries.push_back(Entry{keyword, value});
    }
    if (end == text.size()) break;
  }
}

void SshConfig::include(const std::vector<std::string>& args, const std::string& where, int depth) {
  if (depth >= 16) malformed(where, "Include nested too deeply (a loop?)");
  // An Include inside a Host block applies to that block's hosts: the included lines
  // start under the same condition, and the outer file resumes under it afterwards.
  const Block outer{blocks_.back().patterns, blocks_.back().never, {}};
  for (const auto& arg : args) {
    std::string pattern = expand_tilde(arg);
    if (pattern.empty() || pattern[0] != '/') pattern = home_dir() + "/.ssh/" + pattern;
    std::vector<std::string> paths;  // copied out so a throw below cannot leak the glob
    glob_t matches{};
    if (::glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
      paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
    }
    ::globfree(&matches);
    for (const auto& path : paths) {
      const std::string text = read_capped(path, budget_, where + ": included file '" + path + "'",
                                           "Include only ssh_config files");
      blocks_.push_back(outer);
      parse_into(text, path, depth + 1);
    }
  }
  blocks_.push_back(outer);
}

SshConfig SshConfig::load(const std::string& path) {
  std::size_t budget = kMaxConfigTotalBytes;
  const std::string text =
      read_capped(path, budget, "ssh config '" + path + "'", "check --ssh-config");
  SshConfig config;
  config.filename_ = path;
  config.blocks_.push_back(Block{});
  config.budget_ = budget;
  config.parse_into(text, path, 0);
  return config;
}

SshConfig SshConfig::load_for(const std::string& ssh_config_flag) {
  if (!ssh_config_flag.empty()) return load(ssh_config_flag);
  auto path = home_dir() + "/.ssh/config";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return load(path);
  return SshConfig{};
}

HostConfig SshConfig::lookup(std::string_view host) const {
  HostConfig out;
  for (const auto& block : blocks_) {
    if (block.never) continue;
    if (!block.patterns.empty() && !host_matches(host, block.patterns)) continue;
    for (const auto& e : block.entries) {
      if (e.keyword == "hostname") {
        if (!out.hostname) out.hostname = e.value;
      } else if (e.keyword == "port") {
        if (!out.port) out.port = std::stoi(e.value);
      } else if (e.keyword == "user") {
        if (!out.user) out.user = e.value;
      } else if (e.keyword == "identityfile") {
        out.identity_files.push_back(e.value);
      } else if (e.keyword == "userknownhostsfile") {
        if (!out.user_known_hosts_file) out.user_known_hosts_file = e.value;
      } else if (e.keyword == "stricthostkeychecking") {
        if (!out.strict) out.strict = parse_strict(e.value);
      } else if (e.keyword == "identitiesonly") {
        if (!out.identities_only) out.identities_only = lower(e.value) == "yes";
      } else if (e.keyword == "proxycommand" || e.keyword == "proxyjump") {
        // As in OpenSSH, the first of the two to apply wins; `none` turns both off.
        if (!out.proxy)
          out.proxy =
              lower(e.value) == "none"
                  ? std::string()
                  : std::string(e.keyword == "proxycommand" ? "ProxyCommand " : "ProxyJump ") +
                        e.value;
      } else if (e.keyword == "connecttimeout") {
        if (!out.connect_timeout_s) {
          auto seconds = parse_int(e.value);
          out.connect_timeout_s = seconds.value_or(0);  // "none": set, meaning no limit
        }
      }
    }
  }
  return out;
}

std::string home_dir() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/";
}

std::string local_user() {
  if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_name) return pw->pw_name;
  if (const char* user = std::getenv("USER"); user && *user) return user;
  return "root";
}

std::string expand_tilde(const std::string& path) {
  if (path.empty() || path[0] != '~') return path;
  auto slash = path.find('/');
  std::string name = path.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  std::string rest = slash == std::string::npos ? "" : path.substr(slash);
  if (name.empty()) return home_dir() + rest;
  if (const passwd* pw = ::getpwnam(name.c_str()); pw && pw->pw_dir) return pw->pw_dir + rest;
  return path;
}

namespace {

// Expands the ssh_config tokens hvdrun supports: %% %d %h %n %p %r %u.
std::string expand_tokens(const std::string& value, const Target& t, const std::string& original) {
  std::string out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '%' || i + 1 == value.size()) {
      out += value[i];
      continue;
    }
    switch (value[++i]) {
      case '%':
        out += '%';
        break;
      case 'd':
        out += home_dir();
        break;
      case 'h':
        out += t.hostname;
        break;
      case 'n':
        out += original;
        break;
      case 'p':
        out += std::to_string(t.port);
        break;
      case 'r':
        out += t.user;
        break;
      case 'u':
        out += local_user();
        break;
      default:
        out += '%';
        out += value[i];
        break;
    }
  }
  return out;
}

}  // namespace

namespace {

Target resolve_target(const std::string& host, const SshConfig& config, const SshOptions& options,
                      int depth);

// ProxyJump's value, `[user@]host[:port]` hops separated by commas, as a chain of Targets:
// the last hop is the one this host is reached through, and it is reached through the
// hops before it. A hop's own ssh_config settings apply (its own ProxyJump included);
// -p and -i are for the job's hosts, not for jump hosts.
std::shared_ptr<const Target> jump_chain(const std::string& value, const SshConfig& config,
                                         const SshOptions& options, int depth) {
  if (depth >= 8) throw UsageError("ProxyJump '" + value + "': more than 8 jumps (a loop?)");
  const auto comma = value.rfind(',');
  std::string hop = comma == std::string::npos ? value : value.substr(comma + 1);
  std::string user;
  std::optional<int> port;
  if (const auto at = hop.find('@'); at != std::string::npos) {
    user = hop.substr(0, at);
    hop.erase(0, at + 1);
  }
  if (const auto colon = hop.rfind(':'); colon != std::string::npos && hop.back() != ']') {
    port = parse_int(hop.substr(colon + 1));
    if (!port || *port < 1 || *port > 65535)
      throw UsageError("ProxyJump '" + value + "': bad port in '" + hop + "'");
    hop.erase(colon);
  }
  if (hop.size() > 2 && hop.front() == '[' && hop.back() == ']')
    hop = hop.substr(1, hop.size() - 2);
  if (hop.empty() || hop.front() == '-')
    throw UsageError("ProxyJump '" + value +
                     "': expected [user@]host[:port] hops, comma-separated");
  SshOptions own = options;
  own.port.reset();
  own.identity_file.clear();
  Target t = resolve_target(hop, config, own, depth + 1);
  if (!user.empty()) t.user = user;
  if (port) t.port = *port;
  if (comma != std::string::npos)
    t.jump = jump_chain(value.substr(0, comma), config, options, depth + 1);
  return std::make_shared<const Target>(std::move(t));
}

Target resolve_target(const std::string& host, const SshConfig& config, const SshOptions& options,
                      int depth) {
  HostConfig hc = config.lookup(host);
  Target t;
  t.alias = host;
  t.hostname = host;
  if (hc.hostname) {
    Target tmp;
    tmp.hostname = host;
    t.hostname = expand_tokens(*hc.hostname, tmp, host);
  }
  t.port = options.port.value_or(hc.port.value_or(22));
  t.user = hc.user.value_or(local_user());
  if (!options.identity_file.empty())
    t.identity_files.push_back(expand_tilde(options.identity_file));
  for (const auto& f : hc.identity_files) {
    auto path = expand_tilde(expand_tokens(f, t, host));
    if (std::find(t.identity_files.begin(), t.identity_files.end(), path) ==
        t.identity_files.end()) {
      t.identity_files.push_back(path);
    }
  }
  t.identities_only = hc.identities_only.value_or(false);
  for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) {
    if (t.identities_only && !t.identity_files.empty()) break;
    auto path = home_dir() + "/.ssh/" + name;
    if (std::find(t.identity_files.begin(), t.identity_files.end(), path) ==
        t.identity_files.end()) {
      t.default_identity_files.push_back(path);
    }
  }
  if (const char* sock = std::getenv("SSH_AUTH_SOCK"); sock && *sock) t.agent_socket = sock;
  t.known_hosts_file = hc.user_known_hosts_file
                           ? expand_tilde(expand_tokens(*hc.user_known_hosts_file, t, host))
                           : home_dir() + "/.ssh/known_hosts";
  t.strict = hc.strict.value_or(StrictHostKeyChecking::accept_new);
  int seconds = hc.connect_timeout_s.value_or(10);
  if (seconds <= 0) seconds = options.start_timeout_s;  // "none": only --start-timeout limits
  if (options.start_timeout_s > 0) seconds = std::min(seconds, options.start_timeout_s);
  t.connect_timeout = std::chrono::seconds(std::max(seconds, 1));
  if (hc.proxy && hc.proxy->rfind("ProxyJump ", 0) == 0) {
    t.jump = jump_chain(hc.proxy->substr(10), config, options, depth);
  } else if (hc.proxy) {
    t.proxy = *hc.proxy;
  }
  return t;
}

}  // namespace

Target resolve_target(const std::string& host, const SshConfig& config, const SshOptions& options) {
  return resolve_target(host, config, options, 0);
}

}  // namespace hvdrun::ssh
