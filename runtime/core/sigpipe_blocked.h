// SIGPIPE blocked on the calling thread for a scope. Gloo writes to its sockets without
// MSG_NOSIGNAL, so a peer that died makes the write raise SIGPIPE, which would end this
// process before it could say which peer. While a Gloo call runs on this thread SIGPIPE is
// blocked (the write fails with EPIPE and Gloo throws), and a SIGPIPE left pending by it
// is taken before the mask is restored. Gloo's own event-loop thread inherits the blocked
// mask from the thread that creates the communicator, so the communicators are created
// under this guard too.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <ctime>

namespace hvdrun::runtime {

class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    sigemptyset(&pending);
    if (::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{};
      ::sigtimedwait(&pipe_, nullptr, &zero);
    }
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
};

}  // namespace hvdrun::runtime
