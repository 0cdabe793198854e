// See interfaces.h.
#include "common/interfaces.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>

#include "common/error.h"

namespace hvdrun {
namespace {

// The address bytes of `sa`, an address of `family` (AF_INET or AF_INET6).
const unsigned char* address_bytes(const sockaddr* sa, int family) {
  if (family == AF_INET)
    return reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
  return reinterpret_cast<const unsigned char*>(
      &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
}

/// True when `a` and `b` agree on the bits set in `mask` (all `n` bytes long).
bool same_subnet(const unsigned char* a, const unsigned char* b, const unsigned char* mask,
                 std::size_t n) {
  bool any_mask = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (mask[i]) any_mask = true;
    if ((a[i] & mask[i]) != (b[i] & mask[i])) return false;
  }
  return any_mask;
}

}  // namespace

InterfaceList list_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return nullptr;
  return InterfaceList(list);
}

std::string address_text(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

std::string interface_for_address(const std::string& ip) {
  in_addr v4{};
  in6_addr v6{};
  int family = AF_UNSPEC;
  std::string literal = ip;
  if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']') {
    literal = literal.substr(1, literal.size() - 2);
  }
  if (::inet_pton(AF_INET, literal.c_str(), &v4) == 1) {
    family = AF_INET;
  } else if (::inet_pton(AF_INET6, literal.c_str(), &v6) == 1) {
    family = AF_INET6;
  } else {
    return {};
  }
  const auto* want = family == AF_INET ? reinterpret_cast<const unsigned char*>(&v4)
                                       : reinterpret_cast<const unsigned char*>(&v6);
  const std::size_t n = family == AF_INET ? sizeof(in_addr) : sizeof(in6_addr);
  auto list = list_interfaces();
  if (!list) throw_errno("finding the interface that owns " + ip, "getifaddrs");

  std::string subnet_match;
  for (ifaddrs* it = list.get(); it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != family) continue;
    const unsigned char* have = address_bytes(it->ifa_addr, family);
    const unsigned char* mask =
        it->ifa_netmask != nullptr ? address_bytes(it->ifa_netmask, family) : nullptr;
    if (std::memcmp(have, want, n) == 0) return it->ifa_name;
    if (subnet_match.empty() && mask != nullptr && same_subnet(have, want, mask, n)) {
      subnet_match = it->ifa_name;
    }
  }
  return subnet_match;
}

bool usable_address(const ifaddrs& a) {
  if (a.ifa_addr == nullptr || a.ifa_name == nullptr || (a.ifa_flags & IFF_UP) == 0) return false;
  if (a.ifa_addr->sa_family == AF_INET) return true;
  return a.ifa_addr->sa_family == AF_INET6 &&
         !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(a.ifa_addr)->sin6_addr);
}

std::string interface_address(const std::string& name, int family) {
  const auto list = list_interfaces();
  std::string other;
  for (const ifaddrs* it = list.get(); it != nullptr; it = it->ifa_next) {
    if (!usable_address(*it) || name != it->ifa_name) continue;
    if (it->ifa_addr->sa_family == family) return address_text(it->ifa_addr);
    if (other.empty()) other = address_text(it->ifa_addr);
  }
  return other;
}

}  // namespace hvdrun
