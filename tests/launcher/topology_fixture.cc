// The hand-written topologies of topology_fixture.h.
#include "tests/launcher/topology_fixture.h"

namespace hvdrun::launcher::testing {

HostTopology two_socket_eight_gpu() {
  constexpr int kCores = 64;
  constexpr std::uint64_t kNodeMemory = 64ULL << 30U;
  HostTopology t;
  t.hostname = "node1";
  t.packages = {Package{0}, Package{1}};
  for (int n = 0; n < 4; ++n) t.numa_nodes.push_back(NumaNode{n, n / 2, kNodeMemory, {}});
  for (int i = 0; i < kCores; ++i) {
    t.cores.push_back(Core{i, i / 32, i / 16, i / 8, {i, i + kCores}});
    t.numa_nodes[static_cast<std::size_t>(i / 16)].cpus.push_back(i);
  }
  for (auto& n : t.numa_nodes) {
    for (int c = n.os_index * 16; c < n.os_index * 16 + 16; ++c) n.cpus.push_back(c + kCores);
  }
  for (int g = 0; g < 8; ++g) {
    t.gpus.push_back(Gpu{g, "cuda" + std::to_string(g), "", g / 2});
  }
  t.nics = {Nic{"ib0", "", 0}, Nic{"ib1", "", 2}};
  for (int c = 0; c < 2 * kCores; ++c) t.allowed_cpus.push_back(c);
  return t;
}

HostTopology odd_numa(bool node1_without_memory) {
  constexpr std::uint64_t kGiB = 1ULL << 30U;
  HostTopology t;
  t.hostname = "odd";
  t.packages = {Package{0}};
  t.numa_nodes = {NumaNode{0, 0, kGiB, {0, 1}},
                  NumaNode{1, 0, node1_without_memory ? 0 : kGiB, {2, 3}},
                  NumaNode{2, 0, kGiB, {}}};
  for (int i = 0; i < 4; ++i) t.cores.push_back(Core{i, 0, i / 2, -1, {i}});
  t.gpus = {Gpu{0, "cuda0", "", 0}, Gpu{1, "cuda1", "", 2}};
  t.allowed_cpus = {0, 1, 2, 3};
  return t;
}

}  // namespace hvdrun::launcher::testing
