// Local-host detection and interface addresses, from gethostname() and getifaddrs().
#include "launcher/local_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "common/error.h"

namespace hvdrun::launcher {
namespace {

struct IfaddrsDeleter {
  void operator()(ifaddrs* p) const { freeifaddrs(p); }
};

std::unique_ptr<ifaddrs, IfaddrsDeleter> interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return nullptr;
  return std::unique_ptr<ifaddrs, IfaddrsDeleter>(list);
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

}  // namespace

bool is_local_host(const std::string& name) {
  if (name == "localhost" || name == "127.0.0.1" || name == "::1" || name == "localhost.localdomain") {
    return true;
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) {
    std::string full = host;
    if (name == full || name == full.substr(0, full.find('.'))) return true;
  }
  // Only address literals are compared with interface addresses.
  unsigned char tmp[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, name.c_str(), tmp) != 1 && ::inet_pton(AF_INET6, name.c_str(), tmp) != 1) {
    return false;
  }
  auto list = interfaces();
  for (ifaddrs* i = list.get(); i; i = i->ifa_next) {
    if (i->ifa_addr && address_text(i->ifa_addr) == name) return true;
  }
  return false;
}

std::string interface_address(const std::string& ifname) {
  auto list = interfaces();
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
    throw UsageError("--network-interface " + ifname + ": no such interface on this host (it has: " +
                     names + ")");
  }
  throw UsageError("--network-interface " + ifname + ": the interface has no IP address");
}

}  // namespace hvdrun::launcher
