// Process sets (see process_set.h): the environment of a rank inside one.
#include "runtime/world/process_set.h"

#include <algorithm>

#include "runtime/world/world.h"

namespace hvdrun::runtime {

Environment set_environment(const Environment& world, const std::vector<int>& ranks,
                            const std::vector<std::uint64_t>& host_ids) {
  Environment env = world;
  env.size = static_cast<int>(ranks.size());
  env.rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), world.rank) - ranks.begin());
  const std::uint64_t mine = host_ids[static_cast<std::size_t>(world.rank)];
  std::vector<std::uint64_t> hosts;  // the set's hosts, by their lowest member
  env.local_rank = 0;
  env.local_size = 0;
  for (int r : ranks) {
    const std::uint64_t h = host_ids[static_cast<std::size_t>(r)];
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    if (h != mine) continue;
    if (r < world.rank) ++env.local_rank;
    ++env.local_size;
  }
  env.cross_size = static_cast<int>(hosts.size());
  env.cross_rank = static_cast<int>(std::find(hosts.begin(), hosts.end(), mine) - hosts.begin());
  return env;
}

std::string ranks_text(const std::vector<int>& ranks) { return format_ranks(ranks); }

}  // namespace hvdrun::runtime
