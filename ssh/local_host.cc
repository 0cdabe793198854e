// Local-host detection (see local_host.h).
#include "ssh/local_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

namespace hvdrun::ssh {
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
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) < 0) return out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN];
    if (ifa->ifa_addr->sa_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(ifa->ifa_addr);
      out.emplace_back(::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf));
    } else if (ifa->ifa_addr->sa_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr);
      out.emplace_back(::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof buf));
    }
  }
  ::freeifaddrs(list);
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

}  // namespace hvdrun::ssh
