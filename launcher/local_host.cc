// Local-host detection (ssh::is_local_host, shared with the preflight) and interface
// addresses from getifaddrs().
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
#include "ssh/local_host.h"

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
  // One rule for the preflight and the job: a host the preflight took for this machine has
  // no SSH session, so the two must never disagree.
  return ssh::is_local_host(name);
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
