// The host-key side of a login: which key types to ask the server for, and the check of
// the key it sent against known_hosts under StrictHostKeyChecking. Internal to ssh/.
#pragma once

#include <libssh2.h>

#include <string>
#include <vector>

#include "ssh/libssh2_core.h"

namespace hvdrun::ssh {

/// libssh2's host key algorithms as a preference list ("ssh-ed25519,..."), the types
/// known_hosts already has for the host (`known`) first, so a host known by its ECDSA key
/// is not asked for its Ed25519 one. Only names this libssh2 supports; empty when it lists
/// none.
std::string hostkey_preference(LIBSSH2_SESSION* session, const std::vector<std::string>& known);

/// Checks the host key of `core`'s session against `t.known_hosts_file`: a match passes,
/// a changed or revoked key is refused, an unknown one is refused under
/// StrictHostKeyChecking yes and recorded otherwise. Returns a note for the report when a
/// new key was accepted; throws ConnectError naming `address`.
std::string check_host_key(const Target& t, Core& core, const std::string& address);

}  // namespace hvdrun::ssh
