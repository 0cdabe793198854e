// Which hosts are this machine: they run without SSH. A host is local when it is
// `localhost` (or `localhost.localdomain`), this machine's hostname (short or full), or one of its
// interface addresses. Names are not resolved: a name that merely resolves to a loopback address
// (or 127.0.0.2) is remote, so the loopback test cluster goes through SSH.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::ssh {

/// True when `host` (as written in -H or a hostfile) is this machine.
bool is_local_host(std::string_view host);

/// This machine's interface addresses in numeric form (getifaddrs), IPv4 and IPv6.
std::vector<std::string> local_addresses();

}  // namespace hvdrun::ssh
