// Local-host detection (the one rule the launch plan applies) and interface addresses from
// getifaddrs().
#include "launcher/local_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <vector>

#include "common/error.h"

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

std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  auto list = interfaces();
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
    throw UsageError("--network-interface " + ifname +
                     ": no such interface on this host (it has: " + names + ")");
  }
  throw UsageError("--network-interface " + ifname + ": the interface has no IP address");
}

std::vector<std::string> interface_addresses(const std::string& ifname) {
  auto list = interfaces();
  if (!list) throw_errno("--network-interface " + ifname, "getifaddrs");
  std::vector<std::string> out;
  for (ifaddrs* i = list.get(); i; i = i->ifa_next) {
    if (!i->ifa_name || ifname != i->ifa_name || !i->ifa_addr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family == AF_INET || family == AF_INET6) out.push_back(address_text(i->ifa_addr));
  }
  return out;
}

}  // namespace hvdrun::launcher
