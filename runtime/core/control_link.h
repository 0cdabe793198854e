// The rank's end of the control channel from its agent (common/control_protocol.h,
// docs/elastic.md "In-process recovery"): a thread of its own reads it, so the agent is
// heard whatever the program's threads are doing. An EndGeneration sets the generation's
// end mark (runtime/core/generation_end.h); a Placement is kept for the next init(); the end of
// the channel (the agent or the launcher gone) ends the generation too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/control_protocol.h"
#include "common/fd.h"

namespace hvdrun::runtime {

class ControlLink {
 public:
  /// Takes ownership of `fd` (a connected stream socket) and starts reading it.
  explicit ControlLink(UniqueFd fd);
  /// Stops the reader (without ending the generation) and closes the socket.
  ~ControlLink();
  ControlLink(const ControlLink&) = delete;
  ControlLink& operator=(const ControlLink&) = delete;

  /// Tells the agent this rank uses the elastic API (in `generation`). Throws Error when
  /// the channel is gone.
  void declare_elastic(int generation);
  /// Tells the agent this rank has shut down `generation`. Throws Error when the channel
  /// is gone.
  void left(int generation);
  /// The newest placement for a generation above `after`, waiting for it until
  /// `deadline`; nullopt when none came by then or the channel closed.
  std::optional<control::Placement> wait_placement(int after,
                                                   std::chrono::steady_clock::time_point deadline);
  /// True when a placement for a generation above `after` is held (without a failure it
  /// means hosts were added: the next commit() raises HostsUpdatedInterrupt).
  bool placement_pending(int after) const;
  /// The placement for a generation above `after`, if one is held (no wait).
  std::optional<control::Placement> pending(int after) const;
  /// True once the channel reached end of file or failed.
  bool closed() const;
  /// For a link that lives as long as the process and is never destroyed (the runtime's
  /// own): its reader is detached, so a reader that ended with the channel is not left
  /// unjoined at exit. The destructor must not run after this.
  void keep_for_process();

 private:
  void read_loop();
  void send(const control::Message& m);

  UniqueFd fd_;
  UniqueFd stop_read_, stop_write_;  // a pipe that wakes the reader to stop
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::optional<control::Placement> placement_;
  bool closed_ = false;
  std::mutex send_mu_;
  std::thread reader_;
};

/// hvdrun_elastic_declare (runtime/api/api.cc): 1 when the agent was told, 0 without a channel.
/// Throws Error before init() or when the agent is gone.
int declare_elastic();
/// hvdrun_elastic_joining (runtime/api/api.cc): 1 while this process runs as a job of one before
/// joining a running elastic job (HVDRUN_JOINING), else 0. Throws Error before init().
int joining_alone();
/// hvdrun_hosts_updated (runtime/api/api.cc): the host-change bits of a pending placement.
int pending_host_update();

}  // namespace hvdrun::runtime
