// DeepSpeed's --include / --exclude: which hosts of the host list (and which of their GPU
// slots) a job uses, as `node1:0,2@node2`. Pure functions on the parsed host list.
#pragma once

#include <string_view>
#include <vector>

#include "hostfile/hosts.h"

namespace hvdrun::hostfile {

/// `hosts` kept by --include `include` or left by --exclude `exclude` (at most one of them
/// non-empty), in their original order. Each `@`-separated entry is `host` (the whole host)
/// or `host:S,S,...`, S being one of the host's GPU slots: its `gpus=` list, else 0 to
/// slots-1. Include keeps only the hosts named, a host with a slot list keeping those slots;
/// exclude drops a host named alone and the slots listed from the others. A host left with a
/// slot list gets one slot per GPU in it and those GPUs as its `gpus`. Throws UsageError for
/// both flags given, a host or slot not in the list, a malformed entry, or no host left.
std::vector<HostSlots> filter_hosts(const std::vector<HostSlots>& hosts, std::string_view include,
                                    std::string_view exclude);

}  // namespace hvdrun::hostfile
