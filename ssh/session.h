// The SSH interface the rest of hvdrun codes against: a Target (where and how to log in),
// a Connector that opens authenticated Sessions, and exec Channels usable from a poll
// loop. The real side is libssh2 (ssh/libssh2_session.h); tests/support has a fake.
// Failures to log in are ConnectErrors carrying the preflight verdict and a fix.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace hvdrun::ssh {

/// Monotonic clock used for every SSH deadline.
using Clock = std::chrono::steady_clock;
/// A point in time by which an operation must have finished.
using Deadline = Clock::time_point;

/// Outcome of checking one host, as printed by `hvdrun check`.
enum class Verdict {
  ok,                ///< Logged in and found the expected hvdrun.
  dns,               ///< The name does not resolve.
  refused,           ///< No TCP connection (refused, unreachable).
  timeout,           ///< No answer within the deadline.
  not_ssh,           ///< Something answered, but not an SSH server.
  host_key_unknown,  ///< StrictHostKeyChecking=yes and the host key is not in known_hosts.
  host_key_changed,  ///< known_hosts holds a different key for the host (always refused).
  auth,              ///< No key was accepted.
  hvdrun_missing,    ///< hvdrun absent at the expected path, or another version.
  unsupported,       ///< ssh_config asks for what hvdrun cannot do (ProxyCommand, ProxyJump).
};

/// The verdict's name as printed: "ok", "dns", ..., "not-ssh", "host-key-changed".
std::string_view to_string(Verdict verdict);

/// StrictHostKeyChecking: what to do with a host key that is not in known_hosts.
enum class StrictHostKeyChecking {
  yes,         ///< Refuse unknown keys (verdict host-key-unknown).
  accept_new,  ///< Record the new key and go on (the default).
  no,          ///< Same as accept_new here: a changed key is refused regardless.
};

/// Everything needed to log in to one host, after ssh_config and the command line.
struct Target {
  /// The host as the user wrote it in -H or the hostfile (used in messages).
  std::string alias;
  /// The name or address to connect to (ssh_config HostName, else the alias).
  std::string hostname;
  /// TCP port.
  int port = 22;
  /// Remote user name.
  std::string user;
  /// Key files to try after the agent: -i first, then ssh_config IdentityFiles, expanded.
  std::vector<std::string> identity_files;
  /// Key files tried last, only when they exist (~/.ssh/id_ed25519, id_ecdsa, id_rsa).
  std::vector<std::string> default_identity_files;
  /// ssh-agent socket (SSH_AUTH_SOCK); empty means no agent.
  std::string agent_socket;
  /// IdentitiesOnly: only agent keys whose public half matches one of identity_files,
  /// and no default key files.
  bool identities_only = false;
  /// known_hosts file to check and to record new keys in.
  std::string known_hosts_file;
  /// Policy for keys not in known_hosts.
  StrictHostKeyChecking strict = StrictHostKeyChecking::accept_new;
  /// Deadline for resolving, connecting and receiving the server's banner.
  std::chrono::milliseconds connect_timeout{10000};
  /// ssh_config's ProxyCommand line for this host ("ProxyCommand ssh -W %h:%p b"), or
  /// empty. hvdrun does not run proxy commands, so a connector refuses a target with one.
  std::string proxy;
  /// ProxyJump: the host to connect through (itself possibly behind another), or null for
  /// a direct connection. The connection to this target is then a direct-tcpip channel of
  /// the jump host's session.
  std::shared_ptr<const Target> jump;
};

/// A login that failed, classified for the preflight table.
class ConnectError : public LaunchError {
 public:
  /// `detail` says what was found (without the host name: the caller attaches it);
  /// `fix` says what to do about it; `address` is the one it was about, if known (see
  /// address()).
  ConnectError(Verdict verdict, std::string detail, std::string fix = {}, std::string address = {});
  /// The classification.
  Verdict verdict() const noexcept { return verdict_; }
  /// What was found.
  const std::string& detail() const noexcept { return detail_; }
  /// What to do next; may be empty.
  const std::string& fix() const noexcept { return fix_; }
  /// "host:port" (or the resolved "address:port") the error was about; may be empty.
  const std::string& address() const noexcept { return address_; }

 private:
  Verdict verdict_;
  std::string detail_;
  std::string fix_;
  std::string address_;
};

/// An established session failed (connection lost, channel refused). The message names
/// the host and what was being done.
class SessionError : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

/// The two output streams of a remote command.
enum class Stream { out, err };

/// Returned by Channel::read / write when the operation would block: poll the session's
/// fd for Session::poll_events() and call again.
inline constexpr std::ptrdiff_t kWouldBlock = -1;

/// How a remote command ended.
struct ExitStatus {
  /// Exit code; meaningful when `signal` is empty.
  int code = 0;
  /// Signal name without "SIG" ("KILL", "TERM") when the command was killed.
  std::string signal;
  /// Shell-style code: `code`, or 128 + the signal number for a signal.
  int shell_code() const;
};

/// One exec channel: a remote command with stdin, separate stdout/stderr and an exit
/// status. Non-blocking: reads and writes return kWouldBlock instead of waiting. Not
/// thread-safe; use a session and its channels from one thread at a time. A channel may
/// outlive its Session object (it keeps the connection alive until it is destroyed).
class Channel {
 public:
  virtual ~Channel() = default;
  /// Reads up to `size` bytes of `stream`: the count, 0 at that stream's EOF, or
  /// kWouldBlock. Throws SessionError when the connection fails. Drain both streams
  /// until kWouldBlock before polling: the library may have buffered data already.
  virtual std::ptrdiff_t read(Stream stream, char* buf, std::size_t size) = 0;
  /// Writes up to `size` bytes to the command's stdin: the count written (possibly
  /// short) or kWouldBlock. Throws SessionError.
  virtual std::ptrdiff_t write(const char* data, std::size_t size) = 0;
  /// Sends EOF on stdin. Returns false when it would block (call again). Throws SessionError.
  virtual bool send_eof() = 0;
  /// True once the remote side has sent EOF (the command closed stdout and stderr).
  virtual bool eof() = 0;
  /// The exit status once the remote side has closed the channel; nullopt until then
  /// (would block). Call after eof(); it closes our side of the channel.
  virtual std::optional<ExitStatus> exit_status() = 0;
};

/// An authenticated SSH connection to one host. Move-only through unique_ptr; destroying
/// it disconnects. Not thread-safe: one thread at a time (a different one than the
/// thread that opened it is fine).
class Session {
 public:
  virtual ~Session() = default;
  /// The target this session logged in to.
  virtual const Target& target() const = 0;
  /// The TCP socket, for poll(); -1 for sessions that have none (fakes).
  virtual int fd() const = 0;
  /// Events to poll the fd for after an operation returned kWouldBlock (POLLIN and,
  /// while the library has output pending, POLLOUT).
  virtual short poll_events() const = 0;
  /// Numeric address of our end of the TCP connection (getsockname), e.g. "127.0.0.1"
  /// or "fd00::2": the address this host's ranks use to reach the launcher.
  virtual std::string local_address() const = 0;
  /// "address:port" of the server end ("[v6]:port" for IPv6).
  virtual std::string peer_address() const = 0;
  /// Numeric address of the server end without the port ("127.0.0.2", "fd00::3").
  virtual std::string peer_ip() const = 0;
  /// Something the login did that the user should hear about ("new host key SHA256:...
  /// recorded in FILE"); empty when nothing.
  virtual std::string note() const { return {}; }
  /// Opens an exec channel running `command` (through the user's shell on the host),
  /// waiting up to `deadline`. Throws SessionError.
  virtual std::unique_ptr<Channel> exec(const std::string& command, Deadline deadline) = 0;
  /// Sends an SSH keepalive if one is due (interval set with `interval_s`, 0 = off);
  /// returns seconds until the next one is due. Throws SessionError if the send fails.
  virtual int keepalive(int interval_s) = 0;
};

/// Opens authenticated sessions. Implementations must be safe to call from several
/// threads at once (one host per call).
class Connector {
 public:
  virtual ~Connector() = default;
  /// Resolves, connects, checks the host key and authenticates. The name/TCP/banner
  /// phase ends by min(target.connect_timeout from now, `deadline`); the rest by
  /// `deadline`. Throws ConnectError with the verdict.
  virtual std::unique_ptr<Session> connect(const Target& target, Deadline deadline) = 0;
};

/// Output of a command run to completion with run_command().
struct CommandResult {
  /// Everything the command wrote to stdout.
  std::string out;
  /// Everything it wrote to stderr.
  std::string err;
  /// How it ended.
  ExitStatus status;
};

/// Runs `command` on `session`, sends `input` to its stdin followed by EOF, collects its
/// output and waits for its exit status, all by `deadline`. Throws SessionError
/// (including when the deadline passes). Output beyond `max_output` bytes per stream is
/// dropped.
CommandResult run_command(Session& session, const std::string& command, Deadline deadline,
                          std::string_view input = {}, std::size_t max_output = 1 << 20);

/// Runs `command` on `session` until it prints a line that is exactly `marker` on stdout,
/// or ends, by `deadline`. When the marker comes, `result.out` holds what came before it
/// (start-up noise, a version line), `result.status` is 0 and the channel, whose command
/// goes on running, is returned: the rest of its stdout is the caller's. When the command
/// ends first, `result` is what run_command() would give and nullptr is returned. Bytes
/// that came after the marker line in the same read are left in `rest` (a command that
/// waits for its input after the marker sends none). Throws SessionError when the
/// deadline passes.
std::unique_ptr<Channel> run_until_marker(Session& session, const std::string& command,
                                          const std::string& marker, Deadline deadline,
                                          CommandResult& result, std::string& rest);

/// Quotes `word` for a POSIX shell: 'it'\''s'.
std::string shell_quote(std::string_view word);

}  // namespace hvdrun::ssh
