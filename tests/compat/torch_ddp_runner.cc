// Runs a compatibility program at 4 ranks under the real hvdrun binary, on this host
// (local), on two names of this host (twohosts: two local agents, 2 ranks each) or on two
// loopback SSH hosts (ssh), or on this host and one loopback SSH host with
// --network-interface naming an interface of this machine (netif: its non-loopback one
// where there is one, else lo), and checks that every rank reported
// success: torch_ddp.py (unmodified torch.distributed, env://) or horovod_rank.py (a
// Horovod gloo rank's rendezvous over HTTP). A plain program rather than a Catch2 case so
// that ctest can report a proper skip (exit 77) where /usr/bin/python3 cannot import
// torch (Debian: apt-get install python3-torch).
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tests/support/sshd_cluster.h"

namespace {

constexpr int kSkip = 77;

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

int check(const std::vector<std::string>& argv, const std::string& tag, int ranks) {
  std::string cmdline;
  for (const auto& a : argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  std::printf("running: %s\n", cmdline.c_str());
  std::fflush(stdout);
  std::string output;
  const int code = exit_code(hvdrun::testing::run_process(argv, &output));
  std::printf("%s", output.c_str());
  if (code != 0) {
    std::printf("FAIL: hvdrun exited with %d\n", code);
    return 1;
  }
  for (int r = 0; r < ranks; ++r) {
    const std::string want = "[" + std::to_string(r) + "]<stdout>:" + tag + ": rank " +
                             std::to_string(r) + "/" + std::to_string(ranks) + " OK";
    if (output.find(want) == std::string::npos) {
      std::printf("FAIL: no line '%s'\n", want.c_str());
      return 1;
    }
  }
  std::printf("PASS: %d ranks of %s succeeded\n", ranks, tag.c_str());
  return 0;
}

// An interface of this machine with an IPv4 address: a non-loopback one when it is up
// (ranks then reach the launcher from an address other than 127.0.0.1), else lo.
std::string pick_interface() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "lo";
  std::string name = "lo";
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
        !(i->ifa_flags & IFF_LOOPBACK)) {
      name = i->ifa_name;
      break;
    }
  }
  ::freeifaddrs(list);
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s HVDRUN SCRIPT.py local|twohosts|ssh|netif\n", argv[0]);
    return 2;
  }
  const std::string hvdrun = argv[1];
  const std::string script = argv[2];
  const std::string mode = argv[3];
  const std::string python = "/usr/bin/python3";
  // "torch_ddp" for .../torch_ddp.py: the prefix of the rank's success line.
  std::string tag = script.substr(script.rfind('/') + 1);
  tag = tag.substr(0, tag.rfind('.'));
  try {
    std::string probe;
    if (tag == "torch_ddp" &&
        exit_code(hvdrun::testing::run_process(
            {python, "-c", "import torch, torch.distributed, torch.nn.parallel"}, &probe)) != 0) {
      std::printf("SKIP: %s cannot import torch (Debian: apt-get install python3-torch):\n%s",
                  python.c_str(), probe.c_str());
      return kSkip;
    }
    if (mode == "local") {
      return check({hvdrun, "-np", "4", "--start-timeout", "60", python, script, "--slots", "4"},
                   tag, 4);
    }
    if (mode == "twohosts") {
      // Two host names that are both this machine: two local agents, two "nodes".
      return check({hvdrun, "-np", "4", "-H", "localhost:2,127.0.0.1:2", "--start-timeout", "60",
                    python, script, "--slots", "2,2"},
                   tag, 4);
    }
    if (mode == "ssh") {
      hvdrun::testing::SshdCluster cluster(2);
      return check({hvdrun, "-np", "4", "-H", cluster.alias(1) + ":2," + cluster.alias(2) + ":2",
                    "--ssh-config", cluster.ssh_config(), "--start-timeout", "60", python, script,
                    "--slots", "2,2"},
                   tag, 4);
    }
    if (mode == "netif") {
      // Issue #14, item 7: the job's own ranks reach the Horovod rendezvous from the
      // interface's address, and must be served.
      hvdrun::testing::SshdCluster cluster(1);
      const std::string iface = pick_interface();
      std::printf("--network-interface %s\n", iface.c_str());
      return check({hvdrun, "-np", "4", "-H", "localhost:2," + cluster.alias(1) + ":2",
                    "--ssh-config", cluster.ssh_config(), "--network-interface", iface,
                    "--start-timeout", "60", python, script, "--slots", "2,2"},
                   tag, 4);
    }
    std::fprintf(stderr, "unknown mode '%s'; expected local, twohosts, ssh or netif\n",
                 mode.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
