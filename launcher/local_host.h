// Whether a host named in -H or a hostfile is this machine. Only `localhost`, the machine's
// own name and the addresses of its interfaces count: no name resolution, so an ssh_config
// alias such as `node1 -> 127.0.0.2` stays a remote host.
#pragma once

#include <string>

namespace hvdrun::launcher {

/// True for localhost (any case, also localhost.localdomain), gethostname() (full or
/// short, any case, or its canonical FQDN) and any address literal assigned to one of this
/// machine's interfaces (127.0.0.1, ::1, ...). The same rule as ssh::is_local_host, which
/// the preflight uses.
bool is_local_host(const std::string& name);

/// The IPv4 (else IPv6) address of network interface `ifname`; throws UsageError when the
/// interface does not exist or has no address.
std::string interface_address(const std::string& ifname);

}  // namespace hvdrun::launcher
