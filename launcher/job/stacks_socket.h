// `hvdrun stacks` from another terminal (docs/diagnosis.md#the-stack-report): a running job
// listens on a Unix socket in a directory of its user's own (0700), and a connection there
// from the same user asks it for the stack report, which it writes back and prints. Another
// user's connection (root's included) is refused: the peer's uid is checked (SO_PEERCRED).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/fd.h"

namespace hvdrun::launcher {

/// The directory of this user's job sockets: $XDG_RUNTIME_DIR/hvdrun when that is set, else
/// /tmp/hvdrun-UID; made (0700) when missing. Throws Error when it exists but is not a
/// directory of this user's own that only this user can enter.
std::string stacks_socket_dir();

/// The job's listening socket, DIR/job-PID.sock (PID: this hvdrun's); removed when destroyed.
class StacksSocket {
 public:
  /// Throws Error or SystemError when it cannot listen.
  StacksSocket();
  ~StacksSocket();
  StacksSocket(const StacksSocket&) = delete;
  StacksSocket& operator=(const StacksSocket&) = delete;

  /// The listening descriptor (non-blocking), to poll for readability.
  int fd() const { return listen_.get(); }
  /// The next waiting connection of this user (blocking writes with a 2 s limit), or an
  /// empty fd when none waits. Another user's is told so and closed.
  UniqueFd accept_client();

 private:
  std::string path_;
  UniqueFd listen_;
  ino_t inode_ = 0;  // of the socket file bound at path_
};

/// `hvdrun stacks [PID]`: asks the running job of hvdrun PID (without: the only one of this
/// user's) for its stack report and prints it on stdout. Returns the exit status: 0 when a
/// report came, 2 when no job or several match, 1 when the job did not answer.
int run_stacks_client(std::optional<int> pid);

}  // namespace hvdrun::launcher
