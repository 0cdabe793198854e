// The real SSH side: libssh2 (OpenSSL backend) sessions in non-blocking mode, driven by
// poll() under deadlines, so a host that never answers costs its deadline and nothing
// more, and each session can later join the launcher's poll loop.
#pragma once

#include <memory>

#include "ssh/session.h"

namespace hvdrun::ssh {

/// Opens sessions with libssh2. Stateless; safe to use from many threads at once.
class Libssh2Connector : public Connector {
 public:
  /// See Connector::connect. Phases: resolve (all addresses), TCP connect (each address
  /// in turn), wait for the SSH banner, key exchange, host key against known_hosts
  /// (recording a new one under accept-new), then publickey auth: agent, identity files,
  /// default keys. Never prompts.
  std::unique_ptr<Session> connect(const Target& target, Deadline deadline) override;
};

}  // namespace hvdrun::ssh
