// Rank environments (see rank_env.h).
#include "launcher/plan/rank_env.h"

#include "common/env_names.h"
#include "compat/env.h"

#include <algorithm>
#include <cstdlib>

namespace hvdrun::launcher {

EnvList EnvList::from_environ(char* const* env) {
  EnvList out;
  for (; env && *env; ++env) out.set_entry(*env);
  return out;
}

void EnvList::set(std::string_view name, std::string_view value) {
  for (auto& e : entries_) {
    if (e.size() > name.size() && e[name.size()] == '=' &&
        std::string_view(e).substr(0, name.size()) == name) {
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
    if (e.size() > name.size() && e[name.size()] == '=' &&
        std::string_view(e).substr(0, name.size()) == name) {
      return &e;
    }
  }
  return nullptr;
}

bool names_a_path(std::string_view name) {
  for (std::string_view n :
       {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (name == n) return true;
  }
  return false;
}

bool forwarded_by_default(std::string_view name) {
  for (std::string_view n :
       {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (name == n) return true;
  }
  for (std::string_view p :
       {"CUDA_", "NCCL_", "HOROVOD_", "HVDRUN_", "OMP_", "TORCH_", "UCX_", "FI_"}) {
    if (name.substr(0, p.size()) == p) return true;
  }
  return false;
}

namespace {

std::string_view name_of(std::string_view entry) { return entry.substr(0, entry.find('=')); }

// Variables that only some ranks get, from the launcher or their agent: a value in the
// launching shell (hvdrun started from inside a rank) must not reach the others.
bool set_per_rank_only(std::string_view name) {
  return name == env_names::kJoining || name == env_names::kControlFd;
}

// `name` is `pattern`, or starts with it when the pattern ends in '*'.
bool matches(std::string_view name, std::string_view pattern) {
  if (!pattern.empty() && pattern.back() == '*') {
    pattern.remove_suffix(1);
    return name.substr(0, pattern.size()) == pattern;
  }
  return name == pattern;
}

// A -x item naming every variable that starts with its prefix ("TORCH_*").
bool is_pattern(std::string_view item) {
  return !item.empty() && item.back() == '*' && item.find('=') == std::string_view::npos;
}

}  // namespace

EnvSource env_source(std::string_view method) {
  if (method == "local") return EnvSource::launcher;
  if (method == "exec") return EnvSource::container;
  if (method == "join") return EnvSource::node;
  return EnvSource::login;
}

EnvList host_base_env(char* const* launcher_env, EnvSource source,
                      const std::vector<std::string>& user_env) {
  EnvList all = EnvList::from_environ(launcher_env);
  EnvList base;
  if (source == EnvSource::launcher) {
    for (const auto& e : all.entries()) {
      if (!set_per_rank_only(name_of(e))) base.set_entry(e);
    }
  } else if (source != EnvSource::node) {
    // A joined node was started with its own environment: nothing of node 0's goes over it.
    for (const auto& e : all.entries()) {
      const std::string_view name = name_of(e);
      if (forwarded_by_default(name) && !set_per_rank_only(name) &&
          !(source == EnvSource::container && names_a_path(name)))
        base.set_entry(e);
    }
  }
  for (const auto& item : user_env) {
    if (item.find('=') != std::string::npos) {
      base.set_entry(item);
    } else if (is_pattern(item)) {
      for (const auto& e : all.entries()) {
        if (matches(name_of(e), item) && !set_per_rank_only(name_of(e))) base.set_entry(e);
      }
    } else if (const std::string* e = all.get(item)) {
      base.set_entry(*e);
    }
  }
  return base;
}

std::vector<std::string> unset_env_names(char* const* launcher_env,
                                         const std::vector<std::string>& user_env) {
  const EnvList all = EnvList::from_environ(launcher_env);
  std::vector<std::string> unset;
  for (const auto& item : user_env) {
    if (item.find('=') != std::string::npos || all.get(item) != nullptr) continue;
    if (is_pattern(item) &&
        std::any_of(all.entries().begin(), all.entries().end(), [&](const std::string& e) {
          return matches(name_of(e), item) && !set_per_rank_only(name_of(e));
        }))
      continue;
    if (std::find(unset.begin(), unset.end(), item) == unset.end()) unset.push_back(item);
  }
  return unset;
}

std::vector<std::string> host_variables(EnvSource source) {
  switch (source) {
    case EnvSource::launcher:
      return {};
    case EnvSource::login:
      return {"HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_*"};
    case EnvSource::container:
    case EnvSource::node:
      return {"*"};
  }
  return {};
}

EnvList host_defaults(char* const* launcher_env, EnvSource source) {
  EnvList out;
  if (source != EnvSource::login) return out;
  const EnvList all = EnvList::from_environ(launcher_env);
  for (const auto& e : all.entries()) {
    const std::string_view name = name_of(e);
    if (name == "LANG" || matches(name, "LC_*")) out.set_entry(e);
  }
  return out;
}

EnvList merge_rank_env(char* const* host_environ, const std::vector<std::string>& host_variables,
                       const std::vector<std::string>& set,
                       const std::vector<std::string>& defaults) {
  EnvList env;
  if (!host_variables.empty()) {
    const EnvList own = EnvList::from_environ(host_environ);
    for (const auto& e : own.entries()) {
      const std::string_view name = name_of(e);
      if (std::any_of(host_variables.begin(), host_variables.end(),
                      [&](const std::string& p) { return matches(name, p); }))
        env.set_entry(e);
    }
  }
  for (const auto& e : set) env.set_entry(e);
  for (const auto& e : defaults) {
    if (!env.get(name_of(e))) env.set_entry(e);
  }
  return env;
}

RankEnv rank_env(const EnvList& base, const hostfile::RankSlot& slot, const std::string& host_name,
                 const JobEnv& job, const EnvList& host_defaults) {
  RankEnv out;
  EnvList& env = out.set;
  env = base;
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
  if (job.joining) env.set(env_names::kJoining, "1");

  if (!job.network_interface.empty()) env.set(env_names::kNetworkInterface, job.network_interface);

  compat::HostEndpoints ends;
  ends.horovod_rendezvous_addr = job.rendezvous_addr;
  ends.horovod_rendezvous_port = static_cast<std::uint16_t>(job.horovod_port);
  ends.master_addr = job.master_addr;
  ends.master_port = static_cast<std::uint16_t>(job.master_port);
  ends.iface = job.network_interface.empty() ? job.host_interface : job.network_interface;
  compat::CompatEnv compat = compat::compat_env(slot, host_name, job.size, job.num_hosts, ends);
  for (const auto& [name, value] : compat.set) env.set(name, value);
  // Where the host's own variables (a container's) name these, they win too: the agent
  // applies them only where nothing else did.
  for (const auto& [name, value] : compat.defaults) {
    if (!env.get(name)) out.defaults.set(name, value);
  }
  for (const auto& e : host_defaults.entries()) {
    if (!env.get(name_of(e))) out.defaults.set_entry(e);
  }
  if (!job.network_interface.empty()) {
    // Asked for on this command line: beats whatever the shell or the host had.
    env.set("HOROVOD_GLOO_IFACE", job.network_interface);
    env.set("NCCL_SOCKET_IFNAME", job.network_interface);
  }
  return out;
}

}  // namespace hvdrun::launcher
