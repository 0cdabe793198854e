// The loopback SSH cluster for tests and benchmarks: one temp dir with a host key and a
// user key, one `sshd -D` per 15 loopback addresses (127.0.0.1 ... 127.0.0.N, one free
// port), and an ssh_config with aliases node1..nodeN that both hvdrun (--ssh-config) and
// OpenSSH's `ssh -F` understand. Plus small network helpers for fault tests: a port
// nothing listens on, and a listener that accepts TCP and never speaks.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <string>
#include <vector>

#include "common/fd.h"
#include "launcher/plan/launch_options.h"

namespace hvdrun::testing {

/// A running loopback SSH cluster. Needs root (sshd) and /usr/sbin/sshd; creates
/// /run/sshd when missing. Destruction kills every sshd it started (and their session
/// processes) and removes the temp dir.
class SshdCluster {
 public:
  /// Starts sshd for `hosts` addresses (1..254) and waits, under a deadline, until every
  /// address accepts. Throws std::runtime_error with sshd's log when it cannot start.
  /// `session_env`: NAME=VALUE pairs every session gets (sshd's SetEnv), as a site's hosts
  /// set them for logins (HVDRUN_FAKE_GPUS: a host's own GPU list).
  explicit SshdCluster(int hosts, std::vector<std::string> session_env = {});
  ~SshdCluster();
  SshdCluster(const SshdCluster&) = delete;
  SshdCluster& operator=(const SshdCluster&) = delete;

  /// Number of hosts.
  int hosts() const { return hosts_; }
  /// The temp dir holding keys, configs and logs.
  const std::string& dir() const { return dir_; }
  /// The ssh_config with Host node1..nodeN (HostName 127.0.0.k, Port, User root,
  /// IdentityFile, UserKnownHostsFile, StrictHostKeyChecking accept-new).
  const std::string& ssh_config() const { return ssh_config_; }
  /// The private user key authorised on every host (ed25519, no passphrase).
  const std::string& user_key() const { return user_key_; }
  /// The UserKnownHostsFile named in ssh_config (starts empty).
  const std::string& known_hosts() const { return known_hosts_; }
  /// The host's public key line ("ssh-ed25519 AAAA... comment"), same for every host.
  const std::string& host_public_key() const { return host_public_key_; }
  /// The TCP port every sshd listens on.
  int port() const { return port_; }
  /// "node<k>", k from 1.
  std::string alias(int k) const;
  /// "127.0.0.<k>".
  std::string address(int k) const;
  /// LaunchOptions with -H node1..node<n> (1 slot each), --ssh-config set and
  /// start_timeout_s 20.
  launcher::LaunchOptions options(int n) const;
  /// Writes `content` to dir()/name with `mode` and returns the path.
  std::string write_file(const std::string& name, const std::string& content,
                         int mode = 0644) const;
  /// PIDs of the sshd processes serving established connections to host k.
  std::vector<pid_t> session_pids(int k) const;
  /// Sends `sig` to session_pids(k); returns how many were signalled.
  int kill_sessions(int k, int sig = SIGKILL) const;

 private:
  void start_daemons();
  void stop_daemons() noexcept;

  std::vector<std::string> session_env_;
  int hosts_;
  int port_ = 0;
  std::string dir_;
  std::string ssh_config_;
  std::string user_key_;
  std::string known_hosts_;
  std::string host_public_key_;
  std::vector<pid_t> daemons_;
};

/// A 127.0.0.1 port that nothing listens on (bound, then closed).
int unused_port();

/// A TCP listener on 127.0.0.1 that lets connections complete (kernel backlog) but never
/// accepts or sends a byte: the "not an SSH server, never answers" fault.
class SilentListener {
 public:
  /// Binds an ephemeral port and listens.
  SilentListener();
  /// The port.
  int port() const { return port_; }
  /// The listening socket (a test may accept on it itself).
  int fd() const { return fd_.get(); }

 private:
  UniqueFd fd_;
  int port_ = 0;
};

/// A TCP listener on 127.0.0.1 whose accept queue is full, so the kernel drops new SYNs:
/// a connect to it gets no answer at all (the "host is down or firewalled" fault).
class UnansweredListener {
 public:
  /// Listens with a backlog of 0 and fills the queue with its own connections.
  UnansweredListener();
  /// The port.
  int port() const { return port_; }

 private:
  UniqueFd fd_;
  std::vector<UniqueFd> fillers_;
  int port_ = 0;
};

/// A private ssh-agent (`ssh-agent -D -a SOCKET`) for tests of agent authentication.
class SshAgent {
 public:
  /// Starts the agent with its socket in `dir` and waits until it accepts.
  explicit SshAgent(const std::string& dir);
  ~SshAgent();
  SshAgent(const SshAgent&) = delete;
  SshAgent& operator=(const SshAgent&) = delete;
  /// The socket path (for SSH_AUTH_SOCK).
  const std::string& socket() const { return socket_; }
  /// ssh-add `key`, answering its passphrase prompt with `passphrase` through SSH_ASKPASS.
  void add(const std::string& key, const std::string& passphrase = "");

 private:
  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

/// Runs `argv` and returns its exit status (as waitpid's status word); stdout/stderr are
/// appended to `output` when given.
int run_process(const std::vector<std::string>& argv, std::string* output = nullptr);

}  // namespace hvdrun::testing
