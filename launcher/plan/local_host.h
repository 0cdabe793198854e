// What this host is and has, the one home of such queries: whether a host named in -H or a
// hostfile is this machine (only `localhost`, the machine's own name and the addresses of
// its interfaces count: no name resolution, so an ssh_config alias such as
// `node1 -> 127.0.0.2` stays a remote host), its interfaces and their addresses, its
// address and interface toward another host, and a free TCP port.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/interfaces.h"

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

/// A TCP port free on this host right now: binds port 0 on the wildcard address
/// (IPv6 dual-stack when available, else IPv4), reads the port, closes. Another process
/// may take it before it is used; torchrun accepts the same race. Throws SystemError.
std::uint16_t pick_free_port();

/// The interface that owns an address (common/interfaces.h, shared with libhvdrun).
using hvdrun::interface_for_address;

/// This host's own address on the route toward `remote_ip` (a UDP socket "connected" to
/// it, no packet sent, then getsockname). Throws SystemError naming `remote_ip` when
/// there is no route or it is not an address.
std::string local_address_toward(const std::string& remote_ip);

/// The interface this host uses to reach `remote_ip`: what HOROVOD_GLOO_IFACE and
/// NCCL_SOCKET_IFNAME should name on this host when `remote_ip` is the launcher's address
/// (each host finds its own, so hosts with different interface names just work). Empty
/// when it cannot be told. Throws like local_address_toward().
std::string interface_toward(const std::string& remote_ip);

}  // namespace hvdrun::launcher
