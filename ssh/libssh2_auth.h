// Public-key authentication of a libssh2 login: the agent's keys, then the key files, and
// when none is accepted one message that lists what was tried and how to authorise a key.
// Never prompts. Internal to ssh/ (key_is_encrypted aside).
#pragma once

#include <string>

#include "ssh/libssh2_core.h"

namespace hvdrun::ssh {

/// Logs `t.user` in on `core`'s session: "none" first (the methods list), then the agent's
/// keys (only those of the identity files under IdentitiesOnly), then the identity files
/// and the default keys. Throws ConnectError (auth, timeout) naming `address`.
void authenticate(const Target& t, Core& core, Deadline deadline, const std::string& address);

/// True when the private key file at `path` is protected by a passphrase (OpenSSH or
/// PEM format). Sets `readable` to false when the file cannot be read.
bool key_is_encrypted(const std::string& path, bool& readable);

}  // namespace hvdrun::ssh
