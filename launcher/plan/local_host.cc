// What this host is and has: local-host detection (the one rule the launch plan applies),
// interface addresses (from common/interfaces.h), the route toward an address, and a free
// port.
#include "launcher/plan/local_host.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "common/interfaces.h"

namespace hvdrun::launcher {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Canonical numeric form of an address literal, or "" when `text` is not one.
std::string canonical_address(std::string_view text) {
  std::string s(text);
  if (auto pct = s.find('%'); pct != std::string::npos) s.resize(pct);  // fe80::1%eth0
  char buf[INET6_ADDRSTRLEN];
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) return ::inet_ntop(AF_INET, &v4, buf, sizeof buf);
  if (::inet_pton(AF_INET6, s.c_str(), &v6) == 1)
    return ::inet_ntop(AF_INET6, &v6, buf, sizeof buf);
  return {};
}

}  // namespace

std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  auto list = list_interfaces();
  for (ifaddrs* ifa = list.get(); ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    if (ifa->ifa_addr->sa_family == AF_INET || ifa->ifa_addr->sa_family == AF_INET6)
      out.push_back(address_text(ifa->ifa_addr));
  }
  return out;
}

bool is_local_host(std::string_view host) {
  if (iequals(host, "localhost") || iequals(host, "localhost.localdomain")) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') {
    std::string_view self(name);
    if (iequals(host, self)) return true;
    auto dot = self.find('.');
    if (dot != std::string_view::npos && iequals(host, self.substr(0, dot))) return true;
    if (host.find('.') != std::string_view::npos && iequals(host.substr(0, host.find('.')), self) &&
        dot == std::string_view::npos) {
      // "vm.example.com" when the hostname is "vm": the machine's own FQDN.
      addrinfo hints{};
      hints.ai_flags = AI_CANONNAME;
      addrinfo* res = nullptr;
      bool same = false;
      if (::getaddrinfo(name, nullptr, &hints, &res) == 0) {
        same = res && res->ai_canonname && iequals(host, res->ai_canonname);
        ::freeaddrinfo(res);
      }
      if (same) return true;
    }
  }
  auto address = canonical_address(host);
  if (address.empty()) return false;
  auto mine = local_addresses();
  return std::find(mine.begin(), mine.end(), address) != mine.end();
}

std::string interface_address(const std::string& ifname) {
  auto list = list_interfaces();
  if (!list) throw_errno("--network-interface " + ifname, "getifaddrs");
  std::string v6;
  bool exists = false;
  for (ifaddrs* i = list.get(); i; i = i->ifa_next) {
    if (!i->ifa_name || ifname != i->ifa_name) continue;
    exists = true;
    if (!i->ifa_addr) continue;
    if (i->ifa_addr->sa_family == AF_INET) return address_text(i->ifa_addr);
    if (i->ifa_addr->sa_family == AF_INET6 && v6.empty()) v6 = address_text(i->ifa_addr);
  }
  if (!v6.empty()) return v6;
  if (!exists) {
    std::vector<std::string> seen;
    std::string names;
    for (ifaddrs* i = list.get(); i; i = i->ifa_next) {
      if (!i->ifa_name || std::find(seen.begin(), seen.end(), i->ifa_name) != seen.end()) continue;
      seen.emplace_back(i->ifa_name);
      names += (names.empty() ? "" : ", ") + seen.back();
    }
    throw UsageError("--network-interface " + ifname +
                     ": no such interface on this host (it has: " + names + ")");
  }
  throw UsageError("--network-interface " + ifname + ": the interface has no IP address");
}

std::vector<std::string> interface_addresses(const std::string& ifname) {
  auto list = list_interfaces();
  if (!list) throw_errno("--network-interface " + ifname, "getifaddrs");
  std::vector<std::string> out;
  for (ifaddrs* i = list.get(); i; i = i->ifa_next) {
    if (!i->ifa_name || ifname != i->ifa_name || !i->ifa_addr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family == AF_INET || family == AF_INET6) out.push_back(address_text(i->ifa_addr));
  }
  return out;
}

std::uint16_t pick_free_port() {
  // Dual-stack first so the port is free for both families; IPv4 where IPv6 is off.
  UniqueFd fd(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd) {
    int off = 0;
    ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = 0;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      socklen_t len = sizeof(addr);
      if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
        throw_errno("picking a free TCP port on [::]", "getsockname");
      }
      return ntohs(addr.sin6_port);
    }
  }
  fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("picking a free TCP port", "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    throw_errno("picking a free TCP port on 0.0.0.0", "bind");
  }
  socklen_t len = sizeof(addr);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    throw_errno("picking a free TCP port on 0.0.0.0", "getsockname");
  }
  return ntohs(addr.sin_port);
}

std::string local_address_toward(const std::string& remote_ip) {
  std::string literal = remote_ip;
  if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']') {
    literal = literal.substr(1, literal.size() - 2);
  }
  sockaddr_storage remote{};
  socklen_t remote_len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&remote);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&remote);
  if (::inet_pton(AF_INET, literal.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);  // any port: a UDP connect sends nothing
    remote_len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, literal.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    remote_len = sizeof(sockaddr_in6);
  } else {
    throw SystemError(
        "finding the local address toward '" + remote_ip + "' (not an IPv4/IPv6 address)",
        "inet_pton", EINVAL);
  }
  const std::string context = "finding the local address toward " + remote_ip;
  UniqueFd fd(::socket(remote.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno(context, "socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&remote), remote_len) < 0) {
    throw_errno(context, "connect");
  }
  sockaddr_storage local{};
  socklen_t local_len = sizeof(local);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_len) < 0) {
    throw_errno(context, "getsockname");
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr =
      local.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
  if (::inet_ntop(local.ss_family, addr, text, sizeof(text)) == nullptr) {
    throw_errno(context, "inet_ntop");
  }
  return text;
}

std::string interface_toward(const std::string& remote_ip) {
  return interface_for_address(local_address_toward(remote_ip));
}

}  // namespace hvdrun::launcher
