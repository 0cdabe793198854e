// The Slurm launch method's connect-back without Slurm: `srun` is a stand-in script that
// starts the command once per node with SLURMD_NODENAME set, as srun's tasks get it. The
// real agents (the built hvdrun) connect back and authenticate; a peer with the wrong
// secret, or one that reports a node not in the step, is turned away and its node named.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/slurm_launch.h"
#include "tests/support/processes.h"

using namespace hvdrun::launcher;
using namespace std::chrono_literals;

namespace {

// A stand-in srun: `srun --nodes N ... --nodelist a,b,c ... CMD...` runs CMD once per node
// listed, with SLURMD_NODENAME (or the name BODY gives it), and waits for them all.
std::string fake_srun(const hvdrun::testing::TempDir& dir, const std::string& per_node) {
  std::string path = dir.path() + "/srun";
  std::ofstream(path)
      << "#!/bin/bash\n"
         "nodes=\n"
         "while [[ $1 == --* ]]; do [[ $1 == --nodelist ]] && nodes=$2; shift 2; done\n"
         "IFS=, read -ra list <<< \"$nodes\"\n"
         "i=0\n"
         "for node in \"${list[@]}\"; do\n"
      << per_node
      << "  i=$((i + 1))\n"
         "done\n"
         "wait\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

SlurmStepSpec spec_for(const std::string& srun, std::vector<std::string> nodes) {
  SlurmStepSpec s;
  s.nodes = std::move(nodes);
  s.remote_hvdrun = hvdrun::testing::hvdrun_binary();
  s.srun = srun;
  s.bind_address = "127.0.0.1";
  s.deadline = std::chrono::steady_clock::now() + 5s;
  return s;
}

std::string launch_error(const SlurmStepSpec& spec) {
  try {
    start_slurm_agents(spec);
  } catch (const hvdrun::LaunchError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("slurm launch: every node's agent connects back and is linked to its node") {
  hvdrun::testing::TempDir dir("srun");
  const std::string srun =
      fake_srun(dir, "  SLURMD_NODENAME=$node SLURM_JOB_ID=9 SLURM_STEP_ID=0 \"$@\" &\n");
  auto links = start_slurm_agents(spec_for(srun, {"n1", "n2", "n3"}));
  REQUIRE(links.size() == 3);
  for (const auto& [node, link] : links) {
    CHECK(link->describe() == "agent on " + node + " (srun step 9.0)");
    CHECK(link->launcher_address() == "127.0.0.1");
  }
  // Closing a link ends its agent: the stand-in srun then exits by itself.
  for (auto& [node, link] : links) {
    CHECK(link->close(std::chrono::steady_clock::now() + 5s) == "closed its connection");
  }
}

TEST_CASE("slurm launch: a peer without the secret is turned away and its node named") {
  hvdrun::testing::TempDir dir("srun");
  // n2's "agent" holds another secret.
  const std::string srun = fake_srun(
      dir,
      "  if [[ $node == n2 ]]; then HVDRUN_AGENT_SECRET=00ff SLURMD_NODENAME=$node \"$@\" &\n"
      "  else SLURMD_NODENAME=$node \"$@\" & fi\n");
  auto spec = spec_for(srun, {"n1", "n2"});
  spec.deadline = std::chrono::steady_clock::now() + 2s;
  const std::string err = launch_error(spec);
  CHECK(err.rfind("--launcher slurm: no agent from n2 (", 0) == 0);
}

TEST_CASE("slurm launch: an agent reporting a node outside the step is turned away") {
  hvdrun::testing::TempDir dir("srun");
  const std::string srun = fake_srun(dir, "  SLURMD_NODENAME=other$i \"$@\" &\n");
  auto spec = spec_for(srun, {"n1"});
  spec.deadline = std::chrono::steady_clock::now() + 2s;
  CHECK(launch_error(spec).rfind("--launcher slurm: no agent from n1 (", 0) == 0);
}

TEST_CASE("slurm launch: srun that fails is reported with its exit") {
  hvdrun::testing::TempDir dir("srun");
  const std::string srun = dir.path() + "/srun";
  std::ofstream(srun) << "#!/bin/sh\necho 'srun: error: Unable to create step' >&2\nexit 1\n";
  ::chmod(srun.c_str(), 0755);
  CHECK(launch_error(spec_for(srun, {"n1", "n2"}))
            .rfind("--launcher slurm: no agent from n1, n2 (srun exited with code 1;", 0) == 0);
  CHECK(launch_error(spec_for(dir.path() + "/missing-srun", {"n1"})) ==
        "--launcher slurm: cannot run " + dir.path() +
            "/missing-srun: No such file or directory; check that Slurm's srun is on PATH");
}
