// Compatibility variables per rank. See env.h for which variable comes from where.
#include "compat/env.h"

#include <stdexcept>

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

}  // namespace hvdrun::compat
