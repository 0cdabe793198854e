// The subset of ssh_config(5) hvdrun honours (Host patterns, HostName, Port, User,
// IdentityFile, IdentitiesOnly, UserKnownHostsFile, StrictHostKeyChecking, ConnectTimeout,
// Include, ProxyJump; ProxyCommand is recognised in order to refuse it) and the step
// that turns a host name plus the command line into a Target. Parsing is strict about
// the keywords it knows (a malformed line is a UsageError with file:line) and ignores
// the ones it does not, as users' configs are full of them.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ssh/session.h"

namespace hvdrun::ssh {

/// What the command line says about SSH, gathered by the caller (the launcher builds it
/// from its own options), so that this layer needs nothing from above.
struct SshOptions {
  /// -p/--ssh-port: overrides the port from ssh_config for every host.
  std::optional<int> port;
  /// -i/--ssh-identity-file: tried before the IdentityFiles of ssh_config.
  std::string identity_file;
  /// --ssh-config FILE; empty means ~/.ssh/config when present.
  std::string config_file;
  /// --start-timeout in seconds: caps ConnectTimeout (0: no cap).
  int start_timeout_s = 30;
};

/// The settings ssh_config gives one host: the first value of each keyword among the
/// matching blocks, in file order; IdentityFile accumulates. Values are raw (`~` and
/// `%` tokens are expanded by resolve_target()).
struct HostConfig {
  /// HostName.
  std::optional<std::string> hostname;
  /// Port.
  std::optional<int> port;
  /// User.
  std::optional<std::string> user;
  /// IdentityFile, every matching one in order.
  std::vector<std::string> identity_files;
  /// UserKnownHostsFile (the first file named).
  std::optional<std::string> user_known_hosts_file;
  /// StrictHostKeyChecking (`ask` reads as `yes`: hvdrun never prompts).
  std::optional<StrictHostKeyChecking> strict;
  /// ConnectTimeout in seconds (`none` or 0 reads as unset).
  std::optional<int> connect_timeout_s;
  /// IdentitiesOnly: use only the configured key files (and agent keys matching them).
  std::optional<bool> identities_only;
  /// ProxyCommand or ProxyJump as written ("ProxyJump bastion"), the first of the two that
  /// applies; `none` counts as unset (an empty string). ProxyJump is followed through the
  /// jump hosts' direct-tcpip channels; ProxyCommand is refused by name (verdict
  /// unsupported) instead of failing later as dns or timeout.
  std::optional<std::string> proxy;
};

/// A parsed ssh_config file.
class SshConfig {
 public:
  /// An empty configuration (every lookup gives defaults).
  SshConfig() = default;
  /// Parses `text`; `filename` is used in error messages. Throws UsageError
  /// "FILE:LINE: ..." for a malformed line.
  static SshConfig parse(std::string_view text, const std::string& filename);
  /// Reads and parses `path`. Throws UsageError if it cannot be read, or when it or the
  /// files it includes exceed their size caps (1 MiB a file, 16 MiB in all).
  static SshConfig load(const std::string& path);
  /// `--ssh-config FILE` when given (must exist), else ~/.ssh/config when it exists,
  /// else an empty configuration.
  static SshConfig load_for(const std::string& ssh_config_flag);
  /// The settings for `host` (the name as the user wrote it; matched case-insensitively).
  HostConfig lookup(std::string_view host) const;
  /// The file this configuration came from ("" when empty).
  const std::string& filename() const noexcept { return filename_; }

 private:
  struct Entry {
    std::string keyword;  // lower case
    std::string value;
  };
  struct Block {
    std::vector<std::string> patterns;  // empty: applies to every host (before any Host)
    bool never = false;                 // a Match block: not evaluated, never applies
    std::vector<Entry> entries;
  };
  void parse_into(std::string_view text, const std::string& filename, int depth);
  void include(const std::vector<std::string>& args, const std::string& where, int depth);

  std::vector<Block> blocks_;
  std::string filename_;
  std::size_t budget_ = 16 * 1024 * 1024;  // bytes Includes may still read (config.cc)
};

/// Glob match of one ssh_config pattern (`*`, `?`), case-insensitive.
bool glob_match(std::string_view pattern, std::string_view text);

/// True when `host` matches a Host line's patterns: some positive pattern matches and
/// no `!negated` one does.
bool host_matches(std::string_view host, const std::vector<std::string>& patterns);

/// Builds the Target for `host`: ssh_config values, then -p / -i from `options`
/// override (Port) or come first (IdentityFile); defaults for the rest (port 22, the
/// local user, ~/.ssh/known_hosts, accept-new, ConnectTimeout 10 s capped by
/// --start-timeout, SSH_AUTH_SOCK, the default key files that exist).
Target resolve_target(const std::string& host, const SshConfig& config, const SshOptions& options);

/// Expands a leading `~` or `~user` to a home directory.
std::string expand_tilde(const std::string& path);

/// The current user's home directory ($HOME, else the password database).
std::string home_dir();

/// The current user's login name.
std::string local_user();

}  // namespace hvdrun::ssh
