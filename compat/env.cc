// Compatibility variables per rank, the free-port probe and the address-to-interface
// lookup. See env.h for which variable comes from where.
#include "compat/env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/fd.h"

namespace hvdrun::compat {

CompatEnv compat_env(const hostfile::Placement& placement, int rank, const HostEndpoints& host) {
  if (rank < 0 || rank >= placement.size()) {
    throw std::out_of_range("compat_env: rank " + std::to_string(rank) + " outside a job of " +
                            std::to_string(placement.size()));
  }
  const auto& slot = placement.ranks[static_cast<std::size_t>(rank)];
  return compat_env(slot, placement.hosts.at(static_cast<std::size_t>(slot.host_index)).name,
                    placement.size(), static_cast<int>(placement.hosts.size()), host);
}

CompatEnv compat_env(const hostfile::RankSlot& slot, const std::string& hostname, int size,
                     int num_hosts, const HostEndpoints& host) {
  const auto str = [](auto v) { return std::to_string(v); };

  CompatEnv env;
  auto& set = env.set;
  // Horovod gloo mode, as horovodrun's gloo launcher sets it.
  set.emplace_back("HOROVOD_HOSTNAME", hostname);
  set.emplace_back("HOROVOD_RANK", str(slot.rank));
  set.emplace_back("HOROVOD_SIZE", str(size));
  set.emplace_back("HOROVOD_LOCAL_RANK", str(slot.local_rank));
  set.emplace_back("HOROVOD_LOCAL_SIZE", str(slot.local_size));
  set.emplace_back("HOROVOD_CROSS_RANK", str(slot.cross_rank));
  set.emplace_back("HOROVOD_CROSS_SIZE", str(slot.cross_size));
  set.emplace_back("HOROVOD_GLOO_RENDEZVOUS_ADDR", host.horovod_rendezvous_addr);
  set.emplace_back("HOROVOD_GLOO_RENDEZVOUS_PORT", str(host.horovod_rendezvous_port));
  set.emplace_back("HOROVOD_CONTROLLER", "gloo");
  set.emplace_back("HOROVOD_CPU_OPERATIONS", "gloo");
  if (host.gloo_timeout_s)
    set.emplace_back("HOROVOD_GLOO_TIMEOUT_SECONDS", str(*host.gloo_timeout_s));
  // torch.distributed env://, as torchrun sets it (one "node" per host).
  set.emplace_back("RANK", str(slot.rank));
  set.emplace_back("WORLD_SIZE", str(size));
  set.emplace_back("LOCAL_RANK", str(slot.local_rank));
  set.emplace_back("LOCAL_WORLD_SIZE", str(slot.local_size));
  set.emplace_back("GROUP_RANK", str(slot.host_index));
  set.emplace_back("GROUP_WORLD_SIZE", str(num_hosts));
  set.emplace_back("ROLE_RANK", str(slot.rank));
  set.emplace_back("ROLE_WORLD_SIZE", str(size));
  set.emplace_back("ROLE_NAME", "default");
  set.emplace_back("MASTER_ADDR", host.master_addr);
  set.emplace_back("MASTER_PORT", str(host.master_port));

  auto& defaults = env.defaults;
  if (!host.iface.empty()) {
    defaults.emplace_back("HOROVOD_GLOO_IFACE", host.iface);
    defaults.emplace_back("NCCL_SOCKET_IFNAME", host.iface);
  }
  // torchrun's rule: several ranks on one host would oversubscribe its cores otherwise.
  if (slot.local_size > 1) defaults.emplace_back("OMP_NUM_THREADS", "1");
  // horovodrun sets it so that Python ranks' output reaches the launcher line by line.
  defaults.emplace_back("PYTHONUNBUFFERED", "1");
  return env;
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

namespace {

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

struct IfaddrsDeleter {
  void operator()(ifaddrs* p) const noexcept { ::freeifaddrs(p); }
};

}  // namespace

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
  ifaddrs* raw = nullptr;
  if (::getifaddrs(&raw) < 0) throw_errno("finding the interface that owns " + ip, "getifaddrs");
  std::unique_ptr<ifaddrs, IfaddrsDeleter> list(raw);

  std::string subnet_match;
  for (ifaddrs* it = list.get(); it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != family) continue;
    const unsigned char* have = nullptr;
    const unsigned char* mask = nullptr;
    const unsigned char* want = nullptr;
    std::size_t n = 0;
    if (family == AF_INET) {
      have = reinterpret_cast<const unsigned char*>(
          &reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr);
      if (it->ifa_netmask) {
        mask = reinterpret_cast<const unsigned char*>(
            &reinterpret_cast<const sockaddr_in*>(it->ifa_netmask)->sin_addr);
      }
      want = reinterpret_cast<const unsigned char*>(&v4);
      n = sizeof(in_addr);
    } else {
      have = reinterpret_cast<const unsigned char*>(
          &reinterpret_cast<const sockaddr_in6*>(it->ifa_addr)->sin6_addr);
      if (it->ifa_netmask) {
        mask = reinterpret_cast<const unsigned char*>(
            &reinterpret_cast<const sockaddr_in6*>(it->ifa_netmask)->sin6_addr);
      }
      want = reinterpret_cast<const unsigned char*>(&v6);
      n = sizeof(in6_addr);
    }
    if (std::memcmp(have, want, n) == 0) return it->ifa_name;
    if (subnet_match.empty() && mask != nullptr && same_subnet(have, want, mask, n)) {
      subnet_match = it->ifa_name;
    }
  }
  return subnet_match;
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

}  // namespace hvdrun::compat
