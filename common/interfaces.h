// This machine's network interfaces (getifaddrs), for the launcher and libhvdrun alike:
// the list held by RAII, an address's text, and the interface that owns an address.
#pragma once

#include <ifaddrs.h>
#include <sys/socket.h>

#include <memory>
#include <string>

namespace hvdrun {

/// Frees a getifaddrs() list.
struct IfaddrsDeleter {
  void operator()(ifaddrs* p) const noexcept { ::freeifaddrs(p); }
};

/// This machine's interfaces as getifaddrs() lists them; null when they cannot be listed
/// (errno set).
using InterfaceList = std::unique_ptr<ifaddrs, IfaddrsDeleter>;
InterfaceList list_interfaces();

/// The numeric text of an AF_INET or AF_INET6 address ("10.0.0.5", "fe80::1"); "" for
/// another family.
std::string address_text(const sockaddr* sa);

/// The name of the network interface of this host that owns `ip` (an IPv4 or IPv6
/// literal, brackets allowed): the interface with exactly that address, else one whose
/// subnet contains it (127.0.0.2 -> "lo"). Empty when none does or `ip` is not an
/// address. Throws SystemError when the interface list cannot be read.
std::string interface_for_address(const std::string& ip);

/// Whether `a`, one entry of a getifaddrs() list, is an address a socket can listen on and
/// other hosts can dial: its interface is up, and it is IPv4, or IPv6 beyond link-local
/// (which needs a scope the peers do not know).
bool usable_address(const ifaddrs& a);

/// The numeric text of the first usable_address() of interface `name`: of `family`
/// (AF_INET or AF_INET6) when it has one, else of the other. Empty when it has none, or
/// the interfaces cannot be listed.
std::string interface_address(const std::string& name, int family);

}  // namespace hvdrun
