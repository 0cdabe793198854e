// `hvdrun check` end to end: the built binary against the loopback cluster, table and
// JSON, exit 0 and 255. Skips (with a warning) while the binary is not built or the
// subcommand is not wired yet.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>

#include "tests/support/sshd_cluster.h"

using hvdrun::testing::SshdCluster;

TEST_CASE("hvdrun check: table, JSON and exit codes", "[loopback][cli]") {
  const std::string binary = HVDRUN_BINARY_DIR "/cli/hvdrun";
  struct stat st {};
  if (::stat(binary.c_str(), &st) != 0) {
    WARN("skipped: " << binary << " is not built");
    return;
  }
  SshdCluster cluster(2);
  ::unsetenv("SSH_AUTH_SOCK");
  ::setenv("HOME", cluster.dir().c_str(), 1);
  std::string out;
  int status =
      hvdrun::testing::run_process({binary, "check", "--ssh-config", cluster.ssh_config(), "-H",
                                    "localhost,node1,node2", "--remote-hvdrun", binary},
                                   &out);
  if (out.find("not available yet") != std::string::npos) {
    WARN("skipped: `hvdrun check` is not wired in cli/main.cc yet");
    return;
  }
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(out.find("HOST") == 0);
  CHECK(out.find("127.0.0.2:" + std::to_string(cluster.port())) != std::string::npos);
  CHECK(out.find("all ok") != std::string::npos);

  out.clear();
  status =
      hvdrun::testing::run_process({binary, "check", "--json", "--ssh-config", cluster.ssh_config(),
                                    "-H", "node1,nowhere.invalid", "--remote-hvdrun", binary},
                                   &out);
  INFO(out);
  CHECK(WEXITSTATUS(status) == 255);
  CHECK(out.find("{\"ok\": false") != std::string::npos);
  CHECK(out.find("\"verdict\": \"dns\"") != std::string::npos);
}
