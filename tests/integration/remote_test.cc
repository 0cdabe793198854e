// hvdrun end to end with remote hosts: the loopback SSH cluster (sshd on 127.0.0.k, aliases
// node1..nodeN) plus this machine. Placement and environment per rank, tagged output, a
// failing remote rank, SIGINT with nothing left alive, a host that fails the preflight, a
// cwd with a space and -x values with quotes, the secret on no command line, a cwd missing
// on one host, an agent silent past --start-timeout, hosts listed twice, the interface
// each host's ranks get. Processes, pid files and waits come from tests/support
// (processes.h); every wait has a deadline.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pwd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/processes.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using testing::alive;
using testing::count;
using testing::Hvdrun;
using testing::processes_with_cmdline;
using testing::read_file;
// Time bounds stretch under the sanitizers.
constexpr int kSlow = testing::kSlowdown;

namespace {

const std::string kHvdrun = testing::hvdrun_binary();

testing::SshdCluster& cluster() {
  static testing::SshdCluster c(2);
  return c;
}

std::vector<std::string> with_config(std::vector<std::string> args) {
  args.insert(args.begin(), {"--ssh-config", cluster().ssh_config()});
  return args;
}

}  // namespace

TEST_CASE("remote: a mixed job places ranks and sets their environment per host") {
  const std::string script =
      "echo \"R=$HVDRUN_RANK H=$HVDRUN_HOSTNAME L=$HVDRUN_LOCAL_RANK "
      "C=$HVDRUN_CROSS_RANK S=$HVDRUN_SIZE\"; echo err$HVDRUN_RANK >&2";
  Hvdrun h(with_config({"-H", "localhost:2,node1:2,node2:2", "sh", "-c", script}));
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  const char* hosts[] = {"localhost", "node1", "node2"};
  for (int r = 0; r < 6; ++r) {
    std::string line = "[" + std::to_string(r) + "]<stdout>:R=" + std::to_string(r) +
                       " H=" + hosts[r / 2] + " L=" + std::to_string(r % 2) +
                       " C=" + std::to_string(r / 2) + " S=6\n";
    CHECK_THAT(h.out, Catch::Contains(line));
    CHECK_THAT(h.err, Catch::Contains("[" + std::to_string(r) + "]<stderr>:err" +
                                      std::to_string(r) + "\n"));
  }
  CHECK(count(h.out, "<stdout>:") == 6);
}

// Issue #28: a remote rank gets its host's own HOME, USER, LOGNAME, SHELL and locale as a
// login there does (the loopback sshd sets LC_TIME=C.UTF-8 for its sessions; LANG it does
// not set, so the launcher's comes along), and the launcher's PATH, so that a virtualenv's
// `python` resolves on every host as under horovodrun. A local rank gets the launcher's.
TEST_CASE("remote: a rank gets its host's login variables and the launcher's PATH") {
  testing::TempDir dir("remote-env");
  const std::string bin = dir.path() + "/venv/bin";
  REQUIRE(::mkdir((dir.path() + "/venv").c_str(), 0755) == 0);
  REQUIRE(::mkdir(bin.c_str(), 0755) == 0);
  {
    std::ofstream py(bin + "/python");
    py << "#!/bin/sh\necho \"venv R=$HVDRUN_RANK HOME=$HOME USER=$USER LOGNAME=$LOGNAME "
          "SHELL=$SHELL LANG=${LANG:-none} LC_TIME=${LC_TIME:-none}\"\n";
  }
  REQUIRE(::chmod((bin + "/python").c_str(), 0755) == 0);
  const passwd* pw = ::getpwuid(::getuid());
  REQUIRE(pw != nullptr);
  const std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  Hvdrun h(with_config({"-H", "localhost:1,node1:1,node2:1", "python"}),
           {"PATH=" + bin + ":" + path, "HOME=" + dir.path(), "LANG=C.UTF-8", "LC_TIME=C",
            "LOGNAME=launcher", "SHELL=/bin/launcher-shell"});
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  const std::string who =
      std::string(" USER=") + pw->pw_name + " LOGNAME=" + pw->pw_name + " SHELL=" + pw->pw_shell;
  CHECK_THAT(h.out, Catch::Contains("[1]<stdout>:venv R=1 HOME=" + std::string(pw->pw_dir) + who +
                                    " LANG=C.UTF-8 LC_TIME=C.UTF-8\n"));
  CHECK_THAT(h.out, Catch::Contains("[2]<stdout>:venv R=2 HOME=" + std::string(pw->pw_dir) + who +
                                    " LANG=C.UTF-8 LC_TIME=C.UTF-8\n"));
  CHECK_THAT(h.out, Catch::Contains("[0]<stdout>:venv R=0 HOME=" + dir.path()));
  CHECK_THAT(h.out, Catch::Contains("LOGNAME=launcher SHELL=/bin/launcher-shell LANG=C.UTF-8 "
                                    "LC_TIME=C\n"));
}

TEST_CASE("remote: a remote rank's exit code is hvdrun's, with its host and last stderr") {
  const std::string script =
      "if [ $HVDRUN_RANK = 1 ]; then echo remote-boom >&2; exit 5; fi; "
      "exec sleep 30";
  Hvdrun h(with_config({"-H", "localhost:1,node1:1", "sh", "-c", script}));
  CHECK(h.wait() == 5);
  CHECK_THAT(h.err, Catch::Contains("rank 1 on host node1 exited with code 5"));
  CHECK_THAT(h.err, Catch::Contains("    remote-boom\n"));
}

TEST_CASE("remote: SIGINT ends the job with 130 and no rank left alive on any host") {
  testing::TempDir dir("remote");
  Hvdrun h(with_config({"-H", "localhost:1,node1:2,node2:1", "sh", "-c",
                        "echo $$ > " + dir.path() + "/pid.$HVDRUN_RANK; echo up; exec sleep 60"}));
  h.read_until([](const std::string& out) { return count(out, "up\n") == 4; });
  std::vector<pid_t> pids = testing::read_pid_files(dir.path(), "pid.", 4);
  for (pid_t pid : pids) CHECK(alive(pid));
  h.signal(SIGINT);
  CHECK(h.wait() == 130);
  CHECK(testing::wait_none_alive(pids, 5s * kSlow));
}

// Starts a job whose ranks write their pid (and their agent's) into a temp dir and wait.
struct PidJob {
  explicit PidJob(const std::string& hosts, int ranks, std::vector<std::string> env = {})
      : h(with_config({"-H", hosts, "sh", "-c",
                       "echo $$ > " + dir.path() + "/pid.$HVDRUN_RANK; echo $PPID > " + dir.path() +
                           "/agent.$HVDRUN_RANK; echo up; exec sleep 60"}),
          std::move(env)) {
    h.read_until([ranks](const std::string& out) { return count(out, "up\n") == ranks; });
    pids = testing::read_pid_files(dir.path(), "pid.", ranks);
  }
  pid_t read_pid(const std::string& name) const {
    return testing::read_pid_file(dir.path() + "/" + name);
  }
  // True once no rank is alive, waiting up to `within`.
  bool none_alive(std::chrono::milliseconds within) const {
    return testing::wait_none_alive(pids, within);
  }
  testing::TempDir dir{"remote"};
  Hvdrun h;
  std::vector<pid_t> pids;
};

TEST_CASE("remote: a SIGKILLed remote rank makes hvdrun exit 137") {
  Hvdrun h(with_config({"-H", "localhost:1,node1:1", "sh", "-c",
                        "if [ $HVDRUN_RANK = 1 ]; then kill -9 $$; fi; exec sleep 30"}));
  CHECK(h.wait() == 137);
  CHECK_THAT(h.err, Catch::Contains("rank 1 on host node1 was killed"));
}

TEST_CASE("remote: SIGKILL of hvdrun leaves no rank alive on any host") {
  PidJob job("localhost:1,node1:1,node2:1", 3);
  job.h.signal(SIGKILL);
  CHECK(job.h.wait() == 137);
  CHECK(job.none_alive(5s * kSlow));
}

TEST_CASE("remote: a host whose connection dies fails the job, naming the host") {
  PidJob job("localhost:1,node1:1,node2:1", 3);
  auto t0 = Clock::now();
  REQUIRE(cluster().kill_sessions(2) > 0);
  CHECK(job.h.wait(10s * kSlow) == 255);
  CHECK(Clock::now() - t0 < 10s * kSlow);
  CHECK_THAT(job.h.err, Catch::Contains("host node2"));
  CHECK(job.none_alive(5s * kSlow));
}

TEST_CASE("remote: a stopped agent is caught by the heartbeat timeout") {
  PidJob job("localhost:1,node1:1", 2, {"HVDRUN_HEARTBEAT_TIMEOUT=1"});
  pid_t agent = job.read_pid("agent.1");
  REQUIRE(::kill(agent, SIGSTOP) == 0);
  int code = job.h.wait(10s * kSlow);
  ::kill(agent, SIGCONT);  // it then finds its connection gone and ends its rank
  CHECK(code == 255);
  CHECK_THAT(job.h.err, Catch::Contains("host node1") && Catch::Contains("nothing heard from it"));
  CHECK(job.none_alive(5s * kSlow));
}

TEST_CASE("remote: a host that fails the preflight stops the job before anything starts") {
  std::string config = "Host broken\n  HostName 127.0.0.1\n  Port " +
                       std::to_string(testing::unused_port()) + "\n  User root\n  IdentityFile " +
                       cluster().user_key() + "\n  UserKnownHostsFile " + cluster().known_hosts() +
                       "\n\n" + read_file(cluster().ssh_config());
  std::string path = cluster().write_file("broken_config", config);
  Hvdrun h({"--ssh-config", path, "-H", "node1:1,broken:1", "echo", "should-not-run"});
  CHECK(h.wait() == 255);
  CHECK(h.out.find("should-not-run") == std::string::npos);
  CHECK_THAT(h.err, Catch::Contains("broken") && Catch::Contains("refused"));
  CHECK_THAT(h.err, Catch::Contains("node1"));
}

TEST_CASE("remote: the cwd with a space and -x values with quotes arrive intact") {
  const std::string dir = cluster().dir() + "/work dir";
  ::mkdir(dir.c_str(), 0755);
  const std::string value = "a \"b\" 'c'  $HOME;`x`";
  Hvdrun h(with_config({"-H", "node1:1", "-x", "ODD=" + value, "sh", "-c",
                        "printf '%s|%s\\n' \"$(pwd)\" \"$ODD\""}),
           {}, dir);
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  CHECK(h.out == "[0]<stdout>:" + dir + "|" + value + "\n");
}

TEST_CASE("remote: the job secret is on no command line while a remote job runs") {
  Hvdrun h(with_config(
      {"-H", "node1:1,localhost:1", "sh", "-c", "echo \"secret=$HVDRUN_SECRET\"; exec sleep 30"}));
  h.read_until(
      [](const std::string& out) { return count(out, "secret=") == 2 && out.back() == '\n'; });
  auto at = h.out.find("secret=") + 7;
  std::string secret = h.out.substr(at, h.out.find('\n', at) - at);
  REQUIRE(secret.size() == 64);
  int scanned = 0;
  CHECK(processes_with_cmdline(secret, &scanned).empty());
  CHECK(scanned > 4);
  h.signal(SIGINT);
  CHECK(h.wait() == 130);
}

TEST_CASE("remote: the allreduce demo sums across this machine and a remote host") {
  const std::string demo = HVDRUN_BINARY_DIR "/examples/allreduce_demo";
  if (::access(demo.c_str(), X_OK) != 0) {
    WARN("skipped: " << demo << " is not built");
    return;
  }
  Hvdrun h(with_config({"-H", "localhost:2,node1:2", demo}));
  int code = h.wait(60s);
  INFO("stdout: " << h.out << "\nstderr: " << h.err);
  REQUIRE(code == 0);
  CHECK(count(h.out, "expected 10: ok\n") == 4);
  CHECK_THAT(h.out, Catch::Contains("4 ranks on 2 host(s): all ranks agree"));
}

namespace {

// True when this process may make a private mount namespace and mount a tmpfs in it (root
// with CAP_SYS_ADMIN; containers often forbid it).
bool can_hide_directories() {
  const std::string probe = cluster().dir() + "/mount-probe";
  ::mkdir(probe.c_str(), 0755);
  int st = testing::run_process({"unshare", "--mount", "--propagation", "private", "sh", "-c",
                                 "mount -t tmpfs hvdrun-probe '" + probe + "'"});
  ::rmdir(probe.c_str());
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

}  // namespace

TEST_CASE("remote: a cwd missing on one host fails the launch, naming host and directory") {
  // Loopback hosts share this machine's files, so node1's agent runs in a private mount
  // namespace where an empty tmpfs covers the directory's parent: there, the directory is
  // really missing.
  if (!can_hide_directories()) {
    WARN("skipped: unshare --mount / mount -t tmpfs not permitted here");
    return;
  }
  const std::string parent = cluster().dir() + "/hidden";
  const std::string cwd = parent + "/work dir";
  ::mkdir(parent.c_str(), 0755);
  ::mkdir(cwd.c_str(), 0755);
  const std::string wrapper =
      cluster().write_file("hide_cwd.sh",
                           "#!/bin/sh\nexec unshare --mount --propagation private sh -c "
                           "'mount -t tmpfs hvdrun-hidden \"$0\" && exec \"$@\"' '" +
                               parent + "' '" + kHvdrun + "' \"$@\"\n",
                           0755);
  auto t0 = Clock::now();
  Hvdrun h(with_config({"--remote-hvdrun", wrapper, "-H", "localhost:1,node1:1", "sh", "-c",
                        "echo started; exec sleep 30"}),
           {}, cwd);
  int code = h.wait();
  INFO("stderr: " << h.err);
  CHECK(code == 255);
  CHECK(Clock::now() - t0 < 15s * kSlow);  // the local rank was stopped, not waited for
  CHECK_THAT(h.err, Catch::Contains("host node1") &&
                        Catch::Contains("cannot change to directory '" + cwd + "'") &&
                        Catch::Contains("No such file or directory"));
  CHECK(count(h.out, "started") <= 1);  // node1's rank never ran
}

TEST_CASE("remote: an agent that does not report its ranks fails the launch at --start-timeout") {
  // node1's "hvdrun" answers the preflight, but as the agent it reads its input and never
  // says a word: a host where the agent hangs before it starts.
  testing::TempDir tmp("remote");
  const std::string& dir = tmp.path();
  const std::string wrapper = cluster().write_file(
      "silent_agent.sh",
      "#!/bin/sh\nif [ \"$1\" = agent ]; then echo $$ > " + dir +
          "/silent.pid; exec cat > /dev/null; fi\nexec '" + kHvdrun + "' \"$@\"\n",
      0755);
  auto t0 = Clock::now();
  const int timeout_s = 3 * kSlow;
  Hvdrun h(with_config({"--remote-hvdrun", wrapper, "--start-timeout", std::to_string(timeout_s),
                        "-H", "localhost:1,node1:1", "sh", "-c",
                        "echo $$ > " + dir + "/rank.pid; exec sleep 60"}));
  int code = h.wait(20s * kSlow);
  auto elapsed = Clock::now() - t0;
  INFO("stderr: " << h.err);
  CHECK(code == 255);
  CHECK(elapsed >= std::chrono::seconds(timeout_s));
  // One deadline from the start, preflight included; then the teardown.
  CHECK(elapsed < std::chrono::seconds(timeout_s) + 5s * kSlow);
  CHECK_THAT(h.err, Catch::Contains("--start-timeout " + std::to_string(timeout_s) + " s") &&
                        Catch::Contains("host node1: its agent did not answer"));
  CHECK_THAT(h.err, !Catch::Contains("host localhost"));  // its rank had started
  // Nothing left: the local rank and the silent stand-in on node1.
  std::vector<pid_t> pids = {testing::read_pid_file(dir + "/rank.pid"),
                             testing::read_pid_file(dir + "/silent.pid")};
  CHECK(testing::wait_none_alive(pids, 5s * kSlow));
}

TEST_CASE("remote: a host listed twice is a usage error, before anything starts") {
  // As mpirun would merge them but horovodrun gives each entry its own local ranks (two
  // "local rank 0" on one host), hvdrun asks for one entry with the total slots.
  Hvdrun twice(with_config({"-H", "node1:1,node1:1", "echo", "should-not-run"}));
  CHECK(twice.wait() == 2);
  CHECK_THAT(twice.err,
             Catch::Contains("host 'node1' is listed twice") && Catch::Contains("node1:2"));
  CHECK(twice.out.empty());
  Hvdrun cased(with_config({"-H", "localhost:1,LOCALHOST:1", "echo", "should-not-run"}));
  CHECK(cased.wait() == 2);
  CHECK_THAT(cased.err, Catch::Contains("listed twice"));
}

TEST_CASE("remote: a local host however written runs locally next to remote hosts") {
  // The preflight and the job once disagreed on LOCALHOST (the job then found no SSH
  // session for it).
  Hvdrun h(with_config({"-H", "LOCALHOST:1,node1:1", "sh", "-c", "echo \"H=$HVDRUN_HOSTNAME\""}));
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  CHECK_THAT(h.out, Catch::Contains("[0]<stdout>:H=LOCALHOST\n") &&
                        Catch::Contains("[1]<stdout>:H=node1\n"));
}

TEST_CASE("remote: each host's ranks get that host's interface toward the launcher") {
  if (std::getenv("HOROVOD_GLOO_IFACE") || std::getenv("NCCL_SOCKET_IFNAME")) {
    WARN("skipped: HOROVOD_GLOO_IFACE or NCCL_SOCKET_IFNAME is set here, and would win");
    return;
  }
  Hvdrun h(with_config({"-H", "localhost:1,node1:1,node2:1", "sh", "-c",
                        "echo \"G=$HOROVOD_GLOO_IFACE N=$NCCL_SOCKET_IFNAME\""}));
  INFO("stderr: " << h.err);
  REQUIRE(h.wait() == 0);
  for (int r = 0; r < 3; ++r) {
    CHECK_THAT(h.out, Catch::Contains("[" + std::to_string(r) + "]<stdout>:G=lo N=lo\n"));
  }
  // A value the user gives wins, name by name.
  Hvdrun user(with_config({"-H", "node1:1", "-x", "NCCL_SOCKET_IFNAME==user0", "sh", "-c",
                           "echo \"G=$HOROVOD_GLOO_IFACE N=$NCCL_SOCKET_IFNAME\""}));
  INFO("stderr: " << user.err);
  REQUIRE(user.wait() == 0);
  CHECK(user.out == "[0]<stdout>:G=lo N==user0\n");
}

TEST_CASE("remote: a host that gets no rank is not contacted") {
  // -np 1 places the only rank on node1; the second host would fail any login.
  Hvdrun h(with_config({"-H", "node1:1,nosuchhost.invalid:1", "-np", "1", "echo", "ran"}));
  INFO("stderr: " << h.err);
  CHECK(h.wait() == 0);
  CHECK(h.out == "[0]<stdout>:ran\n");
}
