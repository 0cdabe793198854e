// Rank environments (see rank_env.h).
#include "launcher/rank_env.h"

#include "common/env_names.h"
#include "compat/env.h"

#include <cstdlib>

namespace hvdrun::launcher {

EnvList EnvList::from_environ(char* const* env) {
  EnvList out;
  for (; env && *env; ++env) out.set_entry(*env);
  return out;
}

void EnvList::set(std::string_view name, std::string_view value) {
  for (auto& e : entries_) {
    if (e.size() > name.size() && e[name.size()] == '=' && std::string_view(e).substr(0, name.size()) == name) {
      e.resize(name.size() + 1);
      e.append(value);
      return;
    }
  }
  std::string entry(name);
  entry.push_back('=');
  entry.append(value);
  entries_.push_back(std::move(entry));
}

bool EnvList::set_entry(std::string_view entry) {
  auto eq = entry.find('=');
  if (eq == std::string_view::npos || eq == 0) return false;
  set(entry.substr(0, eq), entry.substr(eq + 1));
  return true;
}

const std::string* EnvList::get(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.size() > name.size() && e[name.size()] == '=' && std::string_view(e).substr(0, name.size()) == name) {
      return &e;
    }
  }
  return nullptr;
}

bool forwarded_by_default(std::string_view name) {
  for (std::string_view n : {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (name == n) return true;
  }
  for (std::string_view p : {"CUDA_", "NCCL_", "HOROVOD_", "HVDRUN_", "OMP_"}) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

EnvList host_base_env(char* const* launcher_env, bool local_host,
                      const std::vector<std::string>& user_env) {
  EnvList all = EnvList::from_environ(launcher_env);
  EnvList base;
  if (local_host) {
    base = all;
  } else {
    for (const auto& e : all.entries()) {
      if (forwarded_by_default(std::string_view(e).substr(0, e.find('=')))) base.set_entry(e);
    }
  }
  for (const auto& item : user_env) {
    if (item.find('=') != std::string::npos) {
      base.set_entry(item);
    } else if (const std::string* e = all.get(item)) {
      base.set_entry(*e);
    }
  }
  return base;
}

EnvList rank_env(const EnvList& base, const hostfile::RankSlot& slot, const std::string& host_name,
                 const JobEnv& job) {
  EnvList env = base;
  const std::string rank = std::to_string(slot.rank);
  const std::string size = std::to_string(job.size);
  const std::string local_rank = std::to_string(slot.local_rank);
  const std::string local_size = std::to_string(slot.local_size);
  const std::string cross_rank = std::to_string(slot.cross_rank);
  const std::string cross_size = std::to_string(slot.cross_size);
  const std::string rdv_port = std::to_string(job.rendezvous_port);
  const std::string timeout = std::to_string(job.start_timeout_s);

  env.set(env_names::kRank, rank);
  env.set(env_names::kSize, size);
  env.set(env_names::kLocalRank, local_rank);
  env.set(env_names::kLocalSize, local_size);
  env.set(env_names::kCrossRank, cross_rank);
  env.set(env_names::kCrossSize, cross_size);
  env.set(env_names::kHostname, host_name);
  env.set(env_names::kRendezvousAddr, job.rendezvous_addr);
  env.set(env_names::kRendezvousPort, rdv_port);
  env.set(env_names::kSecret, job.secret);
  env.set(env_names::kStartTimeout, timeout);
  env.set(env_names::kGeneration, std::to_string(job.generation));

  if (!job.network_interface.empty()) env.set(env_names::kNetworkInterface, job.network_interface);

  compat::HostEndpoints ends;
  ends.horovod_rendezvous_addr = job.rendezvous_addr;
  ends.horovod_rendezvous_port = static_cast<std::uint16_t>(job.horovod_port);
  ends.master_addr = job.master_addr;
  ends.master_port = static_cast<std::uint16_t>(job.master_port);
  ends.iface = job.network_interface.empty() ? job.host_interface : job.network_interface;
  compat::CompatEnv compat = compat::compat_env(slot, host_name, job.size, job.num_hosts, ends);
  for (const auto& [name, value] : compat.set) env.set(name, value);
  for (const auto& [name, value] : compat.defaults) {
    if (!env.get(name)) env.set(name, value);
  }
  if (!job.network_interface.empty()) {
    // Asked for on this command line: beats whatever the shell had.
    env.set("HOROVOD_GLOO_IFACE", job.network_interface);
    env.set("NCCL_SOCKET_IFNAME", job.network_interface);
  }
  return env;
}

}  // namespace hvdrun::launcher
