// Whether a host named in -H or a hostfile is this machine. Only `localhost`, the machine's
// own name and the addresses of its interfaces count: no name resolution, so an ssh_config
// alias such as `node1 -> 127.0.0.2` stays a remote host.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hvdrun::launcher {

/// True for localhost (any case, also localhost.localdomain), gethostname() (full or
/// short, any case, or its canonical FQDN) and any address literal assigned to one of this
/// machine's interfaces (127.0.0.1, ::1, ...). Applied once per host, by make_plan(); the
/// preflight and the job read the plan's answer.
bool is_local_host(std::string_view host);

/// This machine's interface addresses in numeric form (getifaddrs), IPv4 and IPv6.
std::vector<std::string> local_addresses();

/// The IPv4 (else IPv6) address of network interface `ifname`; throws UsageError when the
/// interface does not exist or has no address.
std::string interface_address(const std::string& ifname);

/// Every address of interface `ifname` ("10.0.0.5", "fe80::1"), IPv4 and IPv6; empty when
/// it has none or does not exist. Throws SystemError when the interfaces cannot be listed.
std::vector<std::string> interface_addresses(const std::string& ifname);

}  // namespace hvdrun::launcher
