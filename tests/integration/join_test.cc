// Join mode end to end (docs/kubernetes.md): three independent hvdrun processes, one per
// "node" (node 0 listening on 127.0.0.2), started in random order with small random delays,
// run one job. The job's result, torchrun's variables, nodes that count different numbers
// of GPUs, counts that must agree and do not, a node with another secret, a node that never
// comes, a failing rank, and elastic join's start with fewer nodes than MAX, as every node
// sees them; nothing is left running.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "launcher/topology/topology.h"
#include "tests/support/processes.h"

using namespace hvdrun::testing;
using namespace std::chrono_literals;

namespace {

const std::string kDemo = HVDRUN_BINARY_DIR "/examples/allreduce_demo";

// A port free on every address a moment ago: node 0 binds it next on 0.0.0.0, so one free
// on 127.0.0.2 alone may be another test's on 127.0.0.1 (EADDRINUSE).
int free_port() {
  hvdrun::UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  REQUIRE(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// One job of `nodes` hvdrun processes; node ranks started in random order, each after a
// random delay of up to 400 ms.
struct JoinJob {
  TempDir dir{"join"};
  std::string marker = unique_marker();
  int port = free_port();
  std::map<int, std::unique_ptr<Hvdrun>> nodes;
  // --nnodes as given (MIN:MAX for elastic join); empty: the count of nodes started.
  std::string nnodes;

  JoinJob() {
    write_text(dir.path() + "/secret", "a-secret-of-thirty-two-characters\n");
    write_text(dir.path() + "/other", "another-secret-of-32-characters!\n");
  }

  // `per_node_of`: a node's own --nproc-per-node word; `env_of`: its extra variables.
  void start(int count, int per_node, int timeout_s, const std::vector<std::string>& command,
             const std::map<int, std::string>& secret_of = {},
             const std::map<int, std::string>& per_node_of = {},
             const std::map<int, std::vector<std::string>>& env_of = {}) {
    std::vector<int> order(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) order[static_cast<std::size_t>(i)] = i;
    std::mt19937 rng(std::random_device{}());
    std::shuffle(order.begin(), order.end(), rng);
    for (int r : order) {
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
      const auto s = secret_of.find(r);
      // Node 1 takes the secret from HVDRUN_JOB_SECRET, the others from --secret-file.
      const bool from_env = r == 1 && s == secret_of.end();
      std::vector<std::string> env = {marker};
      if (const auto e = env_of.find(r); e != env_of.end())
        env.insert(env.end(), e->second.begin(), e->second.end());
      const auto word = per_node_of.find(r);
      const std::string nproc = word == per_node_of.end() ? std::to_string(per_node) : word->second;
      if (from_env) env.emplace_back("HVDRUN_JOB_SECRET=a-secret-of-thirty-two-characters");
      std::vector<std::string> args = {
          "--nnodes",         nnodes.empty() ? std::to_string(count) : nnodes,
          "--node-rank",      std::to_string(r),
          "--rdzv-endpoint",  "127.0.0.2:" + std::to_string(port),
          "--nproc-per-node", nproc,
          "--rdzv-id",        "job-42",
          "--rdzv-timeout",   std::to_string(timeout_s),
          "--no-python"};
      if (!from_env) {
        args.insert(
            args.end() - 1,
            {"--secret-file", dir.path() + "/" + (s == secret_of.end() ? "secret" : s->second)});
      }
      args.insert(args.end(), command.begin(), command.end());
      nodes[r] = std::make_unique<Hvdrun>(args, env);
    }
  }

  // Every node's exit code, and that nothing of the job is left running.
  std::map<int, int> wait() {
    std::map<int, int> codes;
    for (auto& [r, h] : nodes) codes[r] = h->wait(60s * kSlowdown);
    CHECK(wait_none_with(marker, 10s * kSlowdown));
    return codes;
  }
};

}  // namespace

TEST_CASE("join mode: three nodes in any order run one job with torchrun's variables") {
  JoinJob job;
  const std::string script =
      "echo \"vars $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
      "$MASTER_PORT $TORCHELASTIC_RUN_ID ${HVDRUN_JOB_SECRET:-unset}\"; exec " +
      kDemo + " 64";
  job.start(3, 2, 30, {"sh", "-c", script});
  const auto codes = job.wait();
  const std::string& out = job.nodes[0]->out;
  INFO("node 0's stderr: " << job.nodes[0]->err << "\nnode 1's: " << job.nodes[1]->err
                           << "\nnode 2's: " << job.nodes[2]->err);
  CHECK(codes == std::map<int, int>{{0, 0}, {1, 0}, {2, 0}});
  CHECK(count(out, "allreduce sum of 64 floats = 21, expected 21: ok\n") == 6);
  CHECK(count(out, "[0]<stdout>:allreduce_demo: 6 ranks on 3 host(s): all ranks agree") == 1);
  // torchrun's meaning: ranks fill node after node; MASTER_ADDR is node 0 as each rank
  // reaches it (its own loopback on node 0), MASTER_PORT one port free there.
  std::string master_port;
  for (const std::string& line : lines(out)) {
    std::string_view l(line);
    int rank = -1;
    if (!take(l, "[") || !take_int(l, rank) || !take(l, "]<stdout>:vars ")) continue;
    const std::string node_addr = rank < 2 ? "127.0.0.1" : "127.0.0.2";
    const std::string head = std::to_string(rank) + " " + std::to_string(rank % 2) + " 6 2 " +
                             std::to_string(rank / 2) + " " + node_addr + " ";
    CHECK(std::string(l.substr(0, head.size())) == head);
    const std::string rest(l.substr(std::min(head.size(), l.size())));
    if (master_port.empty()) master_port = rest;
    CHECK(rest == master_port);
    // No rank inherits the secret, even where the node took it from HVDRUN_JOB_SECRET.
    CHECK(rest.size() > std::string(" job-42 unset").size());
    CHECK(rest.substr(rest.find(' ')) == " job-42 unset");
  }
  CHECK(!master_port.empty());
  // Every rank's output is node 0's to print; the other nodes stay quiet.
  CHECK(job.nodes[1]->out.empty());
  CHECK(job.nodes[2]->out.empty());
}

TEST_CASE("join mode: another secret is refused by name and the missing node is named") {
  JoinJob job;
  job.start(3, 1, 3, {"true"}, {{2, "other"}});
  const auto codes = job.wait();
  CHECK(codes == std::map<int, int>{{0, 255}, {1, 255}, {2, 255}});
  const std::string& err0 = job.nodes[0]->err;
  CHECK_THAT(err0, Catch::Contains("claiming to be 'node rank 2' did not prove the job's secret"));
  CHECK_THAT(err0, Catch::Contains("hvdrun: node 0: node rank 2 did not join within 3 s "
                                   "(--rdzv-timeout)"));
  CHECK_THAT(job.nodes[1]->err, Catch::Contains("node rank 2 did not join within 3 s"));
  CHECK_THAT(job.nodes[2]->err, Catch::Contains("hvdrun: node rank 2: node 0 at 127.0.0.2:" +
                                                std::to_string(job.port) +
                                                " refused this node: it holds another secret"));
}

TEST_CASE("join mode: nodes that count different numbers of GPUs run their own counts") {
  // Node 0 has two GPUs, node 1 one, node 2 three: fake ones, unless this machine has GPUs
  // of its own (or an inherited CUDA_VISIBLE_DEVICES), which come first; then each node is
  // given its list in CUDA_VISIBLE_DEVICES, which wins over both.
  const bool fake = std::getenv("CUDA_VISIBLE_DEVICES") == nullptr &&
                    hvdrun::launcher::load_host_topology().gpus.empty();
  const std::string gpus = fake ? "HVDRUN_FAKE_GPUS=" : "CUDA_VISIBLE_DEVICES=";
  JoinJob job;
  const std::string script =
      "echo \"vars $HVDRUN_RANK $HVDRUN_SIZE $HVDRUN_LOCAL_RANK $HVDRUN_LOCAL_SIZE "
      "$HVDRUN_CROSS_RANK $HVDRUN_CROSS_SIZE $HVDRUN_HOSTNAME $RANK $WORLD_SIZE $LOCAL_RANK "
      "$LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE\"; exec " +
      kDemo + " 64";
  job.start(3, 0, 30, {"sh", "-c", script}, {}, {{0, "gpu"}, {1, "gpu"}, {2, "gpu"}},
            {{0, {gpus + "0,1"}}, {1, {gpus + "0"}}, {2, {gpus + "0,1,2"}}});
  const auto codes = job.wait();
  const std::string& out = job.nodes[0]->out;
  INFO("node 0's stdout: " << out << "\nnode 0's stderr: " << job.nodes[0]->err << "\nnode 1's: "
                           << job.nodes[1]->err << "\nnode 2's: " << job.nodes[2]->err);
  CHECK(codes == std::map<int, int>{{0, 0}, {1, 0}, {2, 0}});
  // Ranks 0-1 on node 0, 2 on node 1, 3-5 on node 2; a cross communicator per local rank
  // over the nodes that have it (Horovod's).
  const std::vector<std::string> want = {
      "0 6 0 2 0 3 node0 0 6 0 2 0 3", "1 6 1 2 0 2 node0 1 6 1 2 0 3",
      "2 6 0 1 1 3 node1 2 6 0 1 1 3", "3 6 0 3 2 3 node2 3 6 0 3 2 3",
      "4 6 1 3 1 2 node2 4 6 1 3 2 3", "5 6 2 3 0 1 node2 5 6 2 3 2 3"};
  for (std::size_t r = 0; r < want.size(); ++r) {
    const std::string tag = "[" + std::to_string(r) + "]<stdout>:";
    CHECK(count(out, tag + "vars " + want[r] + "\n") == 1);
    // The runtime sees the same layout.
    const int local = r < 2 ? static_cast<int>(r) : r < 3 ? 0 : static_cast<int>(r) - 3;
    const int local_size = r < 2 ? 2 : r < 3 ? 1 : 3;
    CHECK(count(out, tag + "rank " + std::to_string(r) + "/6 (local " + std::to_string(local) +
                         "/" + std::to_string(local_size) +
                         "): allreduce sum of 64 floats = 21, expected 21: ok\n") == 1);
  }
  CHECK(count(out, "[0]<stdout>:allreduce_demo: 6 ranks on 3 host(s): all ranks agree") == 1);
}

TEST_CASE("join mode: numbers of ranks per node that disagree are refused") {
  JoinJob job;
  // Node 0 was given 2. Node 1 was given 3: a typo. Node 2 counts its GPUs (two visible):
  // a word beside a number, refused whatever the count.
  job.start(3, 2, 3, {"true"}, {}, {{1, "3"}, {2, "gpu"}}, {{2, {"CUDA_VISIBLE_DEVICES=0,1"}}});
  const auto codes = job.wait();
  CHECK(codes == std::map<int, int>{{0, 255}, {1, 255}, {2, 255}});
  const std::string where = "node 0 at 127.0.0.2:" + std::to_string(job.port);
  CHECK_THAT(job.nodes[1]->err,
             Catch::Contains("hvdrun: node rank 1: " + where +
                             " refused this node: it runs 3 ranks per node, node 0 runs 2; every "
                             "node runs as many: give every node the same --nproc-per-node "
                             "number"));
  CHECK_THAT(job.nodes[2]->err,
             Catch::Contains("hvdrun: node rank 2: " + where +
                             " refused this node: it counts its own ranks (--nproc-per-node gpu: "
                             "2 from CUDA_VISIBLE_DEVICES) and node 0 was given a number "
                             "(--nproc-per-node 2); nodes may run different numbers of ranks "
                             "only when every node counts its own: give every node the same "
                             "--nproc-per-node (gpu, cpu or auto on every node, or the same "
                             "number on every node)"));
  CHECK_THAT(job.nodes[0]->err, Catch::Contains("claiming to be 'node rank 1': it runs 3 ranks"));
  CHECK_THAT(job.nodes[0]->err, Catch::Contains("node ranks 1, 2 did not join within 3 s"));
}

TEST_CASE("join mode: --dry-run on node 0 shows the nodes' ranks and contacts nothing") {
  TempDir dir("join-dry");
  write_text(dir.path() + "/secret", "a-secret-of-thirty-two-characters\n");
  Hvdrun h({"--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.2:1",
            "--nproc-per-node", "2", "--secret-file", dir.path() + "/secret", "--dry-run",
            "--no-python", "true"});
  REQUIRE(h.wait() == 0);
  CHECK(h.out ==
        "launcher: join; hosts from --nnodes and --nproc-per-node; run here without SSH: node0\n"
        "0 node0 0\n1 node0 1\n2 node1 0\n3 node1 1\n");
}

TEST_CASE("join mode: a failing rank ends every node with its code, and its node says so") {
  JoinJob job;
  job.start(3, 2, 30,
            {"sh", "-c", "if [ \"$RANK\" = 3 ]; then echo boom >&2; exit 7; fi; exec sleep 60"});
  const auto codes = job.wait();
  CHECK(codes == std::map<int, int>{{0, 7}, {1, 7}, {2, 7}});
  for (int n = 0; n < 3; ++n) {
    INFO("node " << n);
    CHECK_THAT(job.nodes[n]->err, Catch::Contains("rank 3 on host node1 exited with code 7"));
    CHECK_THAT(job.nodes[n]->err, Catch::Contains("boom"));
  }
  CHECK_THAT(job.nodes[1]->err, Catch::Contains("node rank 1: the failure above is this node's"));
  CHECK(count(job.nodes[2]->err, "this node's") == 0);
}

TEST_CASE("join mode: --nnodes 2:3 starts on the nodes that came once the last call passed") {
  JoinJob job;
  job.nnodes = "2:3";
  // Node 2 never comes: node 0 starts the job of two nodes when the last call (1 s) ends.
  job.start(2, 2, 30, {"sh", "-c", "echo \"size $WORLD_SIZE $HVDRUN_GENERATION\""}, {}, {},
            {{0, {"HVDRUN_JOIN_LAST_CALL=1"}}});
  const auto codes = job.wait();
  INFO("node 0's stderr: " << job.nodes[0]->err << "\nnode 1's: " << job.nodes[1]->err);
  CHECK(codes == std::map<int, int>{{0, 0}, {1, 0}});
  CHECK(count(job.nodes[0]->out, "<stdout>:size 4 0\n") == 4);

  // Fewer than MIN within --rdzv-timeout: node 0 says how many came and who did not.
  JoinJob alone;
  alone.nnodes = "2:3";
  alone.start(1, 1, 2, {"true"});
  CHECK(alone.wait() == std::map<int, int>{{0, 255}});
  CHECK_THAT(alone.nodes[0]->err,
             Catch::Contains("hvdrun: node 0: only 1 node of the 2 that --nnodes MIN:MAX needs "
                             "at least joined; node ranks 1, 2 did not join within 2 s "
                             "(--rdzv-timeout)"));
}
