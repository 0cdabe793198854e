// The byte stream between the launcher and one agent, whatever carries it. The launcher's
// supervision loop polls every link's descriptors, then reads and writes without blocking.
// LocalAgentLink (here) runs `hvdrun agent` as a child over a pipe pair; a remote host's
// link carries the same stream over one SSH exec channel and implements the same interface.
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"

namespace hvdrun::launcher {

/// Outcome of one non-blocking transfer.
struct IoResult {
  enum Kind {
    ok,           ///< `bytes` were transferred (> 0)
    would_block,  ///< nothing can move now; poll again
    eof,          ///< the peer closed its side (read only)
    error,        ///< the link is broken; `message` says why
  };
  Kind kind = ok;
  std::size_t bytes = 0;
  std::string message;
};

/// One agent's byte stream. Every call is non-blocking except close().
class AgentLink {
 public:
  virtual ~AgentLink() = default;

  /// Appends the descriptors to poll: read interest when `want_read` (the launcher pauses
  /// reading while its own output backs up), write interest when `want_write`. A transport
  /// may ask for other events than the obvious ones (an SSH session may need to write in
  /// order to read); callers just poll what they get and then call read()/write() on
  /// every link whose descriptors reported anything.
  virtual void add_pollfds(std::vector<pollfd>& fds, bool want_read, bool want_write) const = 0;

  /// Reads up to `size` bytes into `buf`.
  virtual IoResult read(char* buf, std::size_t size) = 0;

  /// Writes up to `size` bytes from `buf`.
  virtual IoResult write(const char* buf, std::size_t size) = 0;

  /// Ends the stream towards the agent (its stdin sees EOF: it kills its ranks and exits).
  virtual void close_write() = 0;

  /// Forces the agent down at once (SIGKILL for a local child; closing the channel for a
  /// remote one). Ranks follow through their death signal / the agent's EOF handling.
  virtual void abort() = 0;

  /// Closes the link and waits until `deadline` for the agent to end, then aborts it.
  /// Returns a description of how the agent ended ("exited with code 0", ...), or an
  /// empty string when unknown.
  virtual std::string close(std::chrono::steady_clock::time_point deadline) = 0;

  /// How this link reaches its host, for messages ("local agent pid 1234").
  virtual std::string describe() const = 0;

  /// The launcher's address as this host reaches it (the rendezvous address its ranks
  /// use): "127.0.0.1" for a local host, the local address of the SSH connection for a
  /// remote one.
  virtual std::string launcher_address() const = 0;

  /// This host's address as the launcher reaches it (MASTER_ADDR when it runs rank 0):
  /// "127.0.0.1" for a local host, the peer address of the SSH connection for a remote one.
  virtual std::string host_address() const = 0;
};

/// An agent behind a child process of the launcher, linked over the child's stdin and
/// stdout: the local agent, or the command of an `exec:` host.
struct PipeLinkSpec {
  /// The child (the leader of its own process group).
  pid_t pid = -1;
  /// The write end of its stdin and the read end of its stdout, both non-blocking.
  UniqueFd to;
  UniqueFd from;
  /// What the child is in I/O errors ("agent", "the exec: command").
  std::string what;
  /// describe()'s text.
  std::string description;
  /// abort() and close() kill the child's whole process group, not only the child (an
  /// exec: command may leave helpers such as a `docker exec` client).
  bool whole_group = false;
  /// launcher_address() and host_address().
  std::string launcher_address = "127.0.0.1";
  std::string host_address = "127.0.0.1";
};

/// Links to the child `spec` describes. Destroying the link closes it (5 s to end).
std::unique_ptr<AgentLink> make_pipe_agent_link(PipeLinkSpec spec);

/// Starts the agent of a local host as a child process (its own process group,
/// stdin/stdout on pipes, stderr shared with the launcher, SIGTERM when the launcher dies)
/// and links to it. With `exe` empty the child is a plain fork of this process that calls
/// run_agent() directly, which saves loading the binary again (tens of ms per job); that
/// needs this process to be single-threaded, and falls back to "/proc/self/exe" when it is
/// not. Otherwise the child runs `exe agent`. Throws SystemError.
std::unique_ptr<AgentLink> start_local_agent(const std::string& exe = {});

}  // namespace hvdrun::launcher
