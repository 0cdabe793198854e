// Issue #14, the host side: what another local user (`nobody`, through runuser) can do to a
// job by planting files, and what the job's own processes leave behind. Every case runs the
// real hvdrun; the attacker's steps are real commands run as nobody.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/process/job_cgroup.h"
#include "tests/skip.h"
#include "tests/support/processes.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun::testing;
using hvdrun::launcher::cgroup_dir;
using hvdrun::launcher::find_cgroup2_mount;
using hvdrun::launcher::own_cgroup2_path;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

SshdCluster& cluster() {
  static SshdCluster c(2);
  return c;
}

// -H for a job of two ranks on this machine or on two loopback SSH hosts.
std::vector<std::string> two_hosts(bool remote) {
  if (!remote) return {"-H", "localhost:2"};
  return {"--ssh-config", cluster().ssh_config(), "-H", "node1:1,node2:1"};
}

// The state letter of /proc/PID/stat ('T' stopped), or '?' when the process is gone.
char proc_state(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// Polls `pred` every 20 ms until it holds (true) or `within` passes (false).
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds within) {
  const auto deadline = Clock::now() + within;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

bool all_in_state(const std::vector<pid_t>& pids, char state) {
  for (pid_t p : pids)
    if (proc_state(p) != state) return false;
  return true;
}

// "" where this process may make cgroups in its own cgroup v2 (as the agent, run by the same
// user, will), else why not: the cases that need the job cgroup skip with that reason.
std::string cgroup_unavailable() {
  const auto mount = find_cgroup2_mount(read_file("/proc/self/mountinfo"));
  if (!mount) return "no cgroup v2 hierarchy is mounted";
  const auto own = own_cgroup2_path(read_file("/proc/self/cgroup"));
  if (!own) return "no cgroup v2 line in /proc/self/cgroup";
  const auto parent = cgroup_dir(*mount, *own);
  if (!parent) return "this process's cgroup is outside the mounted hierarchy";
  const std::string probe = *parent + "/hvdrun-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0) return "cannot create " + probe + ": " + strerror(errno);
  ::rmdir(probe.c_str());
  return {};
}

// The directory of the cgroup named by the text of a /proc/PID/cgroup ("" if none).
std::string cgroup_dir_in(const std::string& proc_cgroup) {
  const auto mount = find_cgroup2_mount(read_file("/proc/self/mountinfo"));
  const auto path = own_cgroup2_path(proc_cgroup);
  if (!mount || !path) return {};
  return cgroup_dir(*mount, *path).value_or("");
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The job cgroups (hvdrun-LAUNCHERPID-AGENTPID) beside this process's cgroup: those of its
// local agents.
std::vector<std::string> job_cgroups_of(pid_t launcher) {
  std::vector<std::string> out;
  const auto mount = find_cgroup2_mount(read_file("/proc/self/mountinfo"));
  const auto own = own_cgroup2_path(read_file("/proc/self/cgroup"));
  if (!mount || !own) return out;
  const auto dir = cgroup_dir(*mount, *own);
  if (!dir) return out;
  const std::string prefix = "hvdrun-" + std::to_string(launcher) + "-";
  for (const auto& e : std::filesystem::directory_iterator(*dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

// Starts a daemon (setsid: its own session and process group) that writes its pid to
// DIR/daemon, waits for it, then copies the daemon's /proc/PID/cgroup to DIR/daemon.cg.
std::string start_daemon_script(const std::string& d) {
  return "setsid sh -c 'echo $$ > " + d + "/d.tmp && mv " + d + "/d.tmp " + d +
         "/daemon; exec sleep 300' </dev/null >/dev/null 2>&1 & "
         "while [ ! -s " +
         d + "/daemon ]; do sleep 0.02; done; cat /proc/$(cat " + d + "/daemon)/cgroup > " + d +
         "/cg.tmp && mv " + d + "/cg.tmp " + d + "/daemon.cg; ";
}

/// The sanitizer options for a child run as nobody from `dir`: a suppressions file named in
/// TSAN_OPTIONS may sit in a checkout only its owner can read, so it is copied into `dir` and
/// the options point at the copy. Empty when no suppressions file is named.
std::vector<std::string> sanitizer_env_for_nobody(const std::string& dir) {
  const char* opts = std::getenv("TSAN_OPTIONS");
  if (opts == nullptr) return {};
  std::string s = opts;
  const std::string key = "suppressions=";
  const auto at = s.find(key);
  if (at == std::string::npos) return {};
  const auto from = at + key.size();
  const auto to = s.find_first_of(" :", from);
  const std::string file = s.substr(from, to == std::string::npos ? std::string::npos : to - from);
  const std::string copy = dir + "/tsan.supp";
  std::filesystem::copy_file(file, copy);
  REQUIRE(::chmod(copy.c_str(), 0644) == 0);
  s.replace(from, file.size(), copy);
  return {"TSAN_OPTIONS=" + s};
}

}  // namespace

TEST_CASE("libhvdrun writes its own lines to stderr, never the program's stdout") {
  // A rank whose rendezvous server is not there: libhvdrun retries, saying so each time.
  const std::vector<std::string> env = {"HVDRUN_RANK=0",
                                        "HVDRUN_SIZE=1",
                                        "HVDRUN_LOCAL_RANK=0",
                                        "HVDRUN_LOCAL_SIZE=1",
                                        "HVDRUN_CROSS_RANK=0",
                                        "HVDRUN_CROSS_SIZE=1",
                                        "HVDRUN_HOSTNAME=localhost",
                                        "HVDRUN_RENDEZVOUS_ADDR=127.0.0.1",
                                        "HVDRUN_RENDEZVOUS_PORT=" + std::to_string(unused_port()),
                                        "HVDRUN_SECRET=00112233445566778899aabbccddeeff",
                                        "HVDRUN_START_TIMEOUT=2"};
  CapturedProcess rank({kWorker, "barrier"}, env);
  CHECK(rank.wait() == 3);  // init failed
  INFO("stdout: " << rank.out << "\nstderr: " << rank.err);
  CHECK(rank.err.find("retrying (1/") != std::string::npos);
  CHECK(rank.err.find("init failed") != std::string::npos);
  CHECK(rank.out.empty());
}

TEST_CASE("an ssh_config or an Include without end is refused at its cap, not read for ever") {
  TempDir tmp("sec");
  std::string config;
  std::string expected;
  SECTION("--ssh-config /dev/zero") {
    config = "/dev/zero";
    expected =
        "ssh config '/dev/zero': larger than 1 MiB, not an ssh_config file; check "
        "--ssh-config";
  }
  SECTION("Include /dev/zero") {
    config = tmp.path() + "/config";
    write_text(config, "Host node1\n  HostName 127.0.0.2\nInclude /dev/zero\n");
    expected = config + ":3: included file '/dev/zero': larger than 1 MiB";
  }
  SECTION("Includes that add up beyond the total") {
    // 20 files of 900 KB of comments, each under the per-file cap.
    const std::string filler(900'000, '#');
    std::string lines;
    for (int i = 0; i < 20; ++i) {
      write_text(tmp.path() + "/part" + std::to_string(i), filler + "\n");
      lines += "Include " + tmp.path() + "/part" + std::to_string(i) + "\n";
    }
    config = tmp.path() + "/config";
    write_text(config, lines);
    expected = "the configuration with its Includes exceeds 16 MiB";
  }
  auto t0 = Clock::now();
  Hvdrun h({"--ssh-config", config, "-H", "node1:1", "-np", "1", "true"});
  CHECK(h.wait(20s) == 2);
  const double ms = ms_since(t0);
  INFO(h.err);
  CHECK(h.err.find(expected) != std::string::npos);
  CHECK(h.max_rss_kib() < 200 * 1024);
  report_fault(
      {"ssh_config of unbounded size (" + config + ")",
       "exit 2 naming the file; peak RSS " + std::to_string(h.max_rss_kib() / 1024) + " MiB", ms, 0,
       "nothing"});
}

TEST_CASE("what ranks start in sessions of their own does not outlive the job") {
  const bool remote = GENERATE(false, true);
  const bool failure = GENERATE(false, true);
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  // Rank 0 starts two daemons: `setsid` and Python's start_new_session=True, each of which
  // leaves the rank's process group and session, and waits until both are running.
  const std::string start_daemons =
      "setsid sh -c 'echo $$ > " + d + "/d1.tmp && mv " + d + "/d1.tmp " + d +
      "/d1; exec sleep 300' </dev/null >/dev/null 2>&1 & "
      "python3 -c \"import subprocess; p = subprocess.Popen(['sleep', '300'], "
      "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
      "stderr=subprocess.DEVNULL); open('" +
      d +
      "/d2', 'w').write(str(p.pid) + '\\n')\"; "
      "while [ ! -s " +
      d + "/d1 ]; do sleep 0.02; done; ";
  // Normal end: both ranks exit 0. Failure: rank 1 fails once the daemons run, and the
  // teardown stops rank 0.
  const std::string script =
      failure ? "if [ $HVDRUN_RANK = 0 ]; then " + start_daemons + "exec sleep 300; else " +
                    "while [ ! -s " + d + "/d2 ]; do sleep 0.02; done; exit 3; fi"
              : "if [ $HVDRUN_RANK = 0 ]; then " + start_daemons + "fi; true";
  std::vector<std::string> args = two_hosts(remote);
  args.insert(args.end(), {"-np", "2", "sh", "-c", script});
  Hvdrun h(args);
  CHECK(h.wait() == (failure ? 3 : 0));
  INFO("stderr: " << h.err);
  const std::vector<pid_t> daemons = {read_pid_file(d + "/d1"), read_pid_file(d + "/d2")};
  auto t0 = Clock::now();
  const bool gone = wait_none_alive(daemons, 5s * kSlowdown);
  const double ms = ms_since(t0);
  for (pid_t p : daemons)
    if (alive(p)) ::kill(p, SIGKILL);
  CHECK(gone);
  report_fault({std::string("rank starts setsid and start_new_session daemons, ") +
                    (failure ? "then the job fails" : "job ends normally") +
                    (remote ? " (SSH host)" : " (local)"),
                "the agent, their subreaper, kills them at teardown; ms after hvdrun's exit", ms,
                gone ? 0 : 2, "nothing"});
}

TEST_CASE("ranks and what they start with setsid run in the job's cgroup, gone after the job") {
  const bool remote = GENERATE(false, true);
  const std::string why_not = cgroup_unavailable();
  if (!why_not.empty()) HVDRUN_SKIP("no job cgroup can be made here: " << why_not);
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  // Rank 0 leaves a daemon behind and ends normally; it records its own cgroup too.
  const std::string script = "if [ $HVDRUN_RANK = 0 ]; then " + start_daemon_script(d) +
                             "cat /proc/self/cgroup > " + d + "/r.tmp && mv " + d + "/r.tmp " + d +
                             "/rank.cg; fi; true";
  std::vector<std::string> args = two_hosts(remote);
  args.insert(args.end(), {"-np", "2", "sh", "-c", script});
  Hvdrun h(args);
  const std::string job = "0::/hvdrun-" + std::to_string(h.pid()) + "-";
  CHECK(h.wait() == 0);
  INFO("stderr: " << h.err);
  const pid_t daemon = read_pid_file(d + "/daemon");
  const std::string rank_cg = read_file(d + "/rank.cg");
  const std::string daemon_cg = read_file(d + "/daemon.cg");
  // The rank and the daemon it set loose are both in the job's cgroup, hvdrun-JOB-AGENT.
  CHECK(rank_cg.find(job) != std::string::npos);
  CHECK(daemon_cg == rank_cg);
  const std::string dir = cgroup_dir_in(daemon_cg);
  REQUIRE(!dir.empty());
  auto t0 = Clock::now();
  const bool gone = wait_none_alive({daemon}, 5s * kSlowdown);
  const double ms = ms_since(t0);
  if (alive(daemon)) ::kill(daemon, SIGKILL);
  CHECK(gone);
  CHECK(wait_until([&] { return !exists(dir); }, 5s * kSlowdown));
  report_fault({std::string("rank leaves a setsid daemon, job ends normally, cgroup v2 writable") +
                    (remote ? " (SSH host)" : " (local)"),
                "rank and daemon in the job's cgroup; cgroup emptied and removed at teardown; "
                "ms after hvdrun's exit",
                ms, gone ? 0 : 1, "nothing"});
}

TEST_CASE("when the agent is SIGKILLed, the guard empties the job's cgroup: no daemon survives") {
  const std::string why_not = cgroup_unavailable();
  if (!why_not.empty()) HVDRUN_SKIP("no job cgroup can be made here: " << why_not);
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  // The agent on an SSH host dies: its ranks die with it (PR_SET_PDEATHSIG) and its guard
  // kills their groups, but the daemon left both; with no subreaper left it goes to init.
  Hvdrun h({"--ssh-config", cluster().ssh_config(), "-H", "node1:1", "-np", "1", "sh", "-c",
            start_daemon_script(d) + "exec sleep 300"});
  const pid_t daemon = read_pid_file(d + "/daemon", 15s * kSlowdown);
  REQUIRE(wait_until([&] { return exists(d + "/daemon.cg"); }, 5s * kSlowdown));
  const std::string cg = read_file(d + "/daemon.cg");
  const std::string dir = cgroup_dir_in(cg);
  INFO("daemon's cgroup: " << cg);
  // hvdrun-JOB-AGENT: the agent's pid ends the name.
  REQUIRE(cg.find("0::/hvdrun-" + std::to_string(h.pid()) + "-") != std::string::npos);
  const pid_t agent = static_cast<pid_t>(std::stol(cg.substr(cg.rfind('-') + 1)));
  REQUIRE(read_file("/proc/" + std::to_string(agent) + "/cmdline").find("agent") !=
          std::string::npos);
  auto t0 = Clock::now();
  REQUIRE(::kill(agent, SIGKILL) == 0);
  const bool gone = wait_none_alive({daemon}, 10s * kSlowdown);
  const double ms = ms_since(t0);
  if (alive(daemon)) ::kill(daemon, SIGKILL);
  CHECK(gone);
  CHECK(wait_until([&] { return !exists(dir); }, 10s * kSlowdown));
  CHECK(h.wait() != 0);
  report_fault({"agent SIGKILLed on an SSH host while a rank's setsid daemon runs",
                "the rank group guard empties and removes the job's cgroup; ms to the daemon "
                "gone",
                ms, gone ? 0 : 1, "the job (its agent was killed)"});
}

TEST_CASE("without a writable cgroup (as nobody) the job runs and the subreaper still sweeps") {
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  REQUIRE(::chmod(d.c_str(), 0777) == 0);
  // nobody runs a copy, from `d`: the build tree may sit where only its owner can reach
  // it (a checkout in a mktemp -d directory, mode 0700).
  const std::string hvdrun = d + "/hvdrun";
  std::filesystem::copy_file(hvdrun_binary(), hvdrun);
  REQUIRE(::chmod(hvdrun.c_str(), 0755) == 0);
  CapturedProcess p({"runuser", "-u", "nobody", "--", hvdrun, "--verbose", "-H", "localhost:1",
                     "-np", "1", "sh", "-c", start_daemon_script(d) + "true"},
                    sanitizer_env_for_nobody(d), d);
  CHECK(p.wait() == 0);
  INFO("stderr: " << p.err);
  const pid_t daemon = read_pid_file(d + "/daemon");
  auto t0 = Clock::now();
  const bool gone = wait_none_alive({daemon}, 5s * kSlowdown);
  const double ms = ms_since(t0);
  if (alive(daemon)) ::kill(daemon, SIGKILL);
  CHECK(gone);
  if (p.err.find("ranks run in the cgroup") != std::string::npos)
    HVDRUN_SKIP("nobody may make cgroups here (a delegated subtree): no fallback to test");
  // One debug line says why, and nothing else complains.
  CHECK(count(p.err, "no job cgroup (") == 1);
  CHECK(p.err.find("job cgroup:") == std::string::npos);
  CHECK(read_file(d + "/daemon.cg").find("hvdrun-") == std::string::npos);
  report_fault({"rank leaves a setsid daemon, cgroup v2 not writable (hvdrun run by nobody)",
                "no cgroup, one debug line why; the agent as subreaper kills the daemon; ms "
                "after hvdrun's exit",
                ms, gone ? 0 : 1, "nothing"});
}

TEST_CASE("Ctrl-Z suspends the job on every host and fg resumes it") {
  const bool remote = GENERATE(false, true);
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  // Each rank takes 20 steps of 0.1 s, so about 2 s of running, however long it is stopped
  // (one process that forks nothing, so that a stop never catches it inside a fork).
  const std::string script = "echo $$ > " + d + "/t$HVDRUN_RANK && mv " + d + "/t$HVDRUN_RANK " +
                             d +
                             "/pid$HVDRUN_RANK; exec python3 -c \"import time\n"
                             "for _ in range(20): time.sleep(0.1)\nprint('finished')\"";
  std::vector<std::string> args = two_hosts(remote);
  args.insert(args.end(), {"-np", "2", "sh", "-c", script});
  Hvdrun h(args, {"HVDRUN_HEARTBEAT_TIMEOUT=2"});
  const std::vector<pid_t> ranks = read_pid_files(d, "pid", 2);
  auto t0 = Clock::now();
  h.signal(SIGTSTP);
  // hvdrun stops itself, as a shell job does, once every rank is stopped.
  CHECK(wait_until([&] { return proc_state(h.pid()) == 'T' && all_in_state(ranks, 'T'); },
                   5s * kSlowdown));
  const double ms = ms_since(t0);
  // Suspended for longer than the heartbeat timeout: nothing may time out meanwhile. This
  // wait is the fault itself (a user who comes back later), not a wait for an event.
  std::this_thread::sleep_for(3s);
  CHECK(proc_state(h.pid()) == 'T');
  CHECK(all_in_state(ranks, 'T'));
  h.signal(SIGCONT);
  CHECK(wait_until([&] { return proc_state(ranks[0]) != 'T' && proc_state(ranks[1]) != 'T'; },
                   5s * kSlowdown));
  CHECK(h.wait() == 0);
  INFO("stderr: " << h.err);
  CHECK(count(h.out, "<stdout>:finished") == 2);
  report_fault({std::string("Ctrl-Z (SIGTSTP) on hvdrun, fg after 3 s") +
                    (remote ? " (2 SSH hosts)" : " (local)"),
                "every rank stopped (state T), then hvdrun; fg resumes all, exit 0; ms to all "
                "stopped",
                ms, 0, "nothing"});
}

TEST_CASE("hvdrun stopped by SIGSTOP beyond the heartbeat timeout ends the job on every host") {
  const bool remote = GENERATE(false, true);
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  const std::string script = "echo $$ > " + d + "/t$HVDRUN_RANK && mv " + d + "/t$HVDRUN_RANK " +
                             d + "/pid$HVDRUN_RANK; exec sleep 300";
  std::vector<std::string> args = two_hosts(remote);
  args.insert(args.end(), {"-np", "2", "sh", "-c", script});
  Hvdrun h(args, {"HVDRUN_HEARTBEAT_TIMEOUT=2"});
  const std::vector<pid_t> ranks = read_pid_files(d, "pid", 2);
  auto t0 = Clock::now();
  h.signal(SIGSTOP);
  // Every agent notices the silence and stops its ranks: no host runs half a job.
  const bool gone = wait_none_alive(ranks, 15s * kSlowdown);
  const double ms = ms_since(t0);
  CHECK(gone);
  h.signal(SIGCONT);
  CHECK(h.wait() == 255);
  INFO("stderr: " << h.err);
  CHECK(h.err.find("hvdrun itself was stopped (SIGSTOP)") != std::string::npos);
  CHECK(h.err.find("use Ctrl-Z or SIGTSTP") != std::string::npos);
  CHECK(h.err.find("was killed by") == std::string::npos);
  for (pid_t p : ranks)
    if (alive(p)) ::kill(p, SIGKILL);
  report_fault({std::string("hvdrun SIGSTOPped beyond HVDRUN_HEARTBEAT_TIMEOUT=2") +
                    (remote ? " (2 SSH hosts)" : " (local)"),
                "every agent stops its ranks; once continued hvdrun exits 255 saying it was "
                "stopped; ms to all ranks gone",
                ms, gone ? 0 : 2, "the job (it cannot go on)"});
}

TEST_CASE("a rank stopped by SIGSTOP is named as stopped when the others give up on it") {
  const bool remote = GENERATE(false, true);
  std::vector<std::string> args =
      remote ? std::vector<std::string>{"--ssh-config", cluster().ssh_config(), "-H",
                                        "node1:2,node2:1"}
             : std::vector<std::string>{"-H", "localhost:3"};
  // Rank 1 stops itself after init; the others wait in a barrier until HVDRUN_OP_TIMEOUT.
  args.insert(args.end(), {"-np", "3", kWorker, "stop-after-init"});
  auto t0 = Clock::now();
  Hvdrun h(args, {"HVDRUN_OP_TIMEOUT=2"});
  CHECK(h.wait(30s * kSlowdown) == 4);
  const double ms = ms_since(t0);
  INFO("stderr: " << h.err);
  const std::string stopped = std::string("hvdrun: rank 1 on host ") +
                              (remote ? "node1" : "localhost") +
                              " is stopped (by signal 19 (SIGSTOP), ";
  const auto at = h.err.find(stopped);
  CHECK(at != std::string::npos);
  CHECK(h.err.find("and holds up the others; continue it with SIGCONT") != std::string::npos);
  // It comes first: before the rank that gave up waiting.
  const auto gave_up = h.err.find("exited with code 4");
  CHECK(gave_up != std::string::npos);
  CHECK(at < gave_up);
  report_fault({std::string("rank SIGSTOPped after init, HVDRUN_OP_TIMEOUT=2") +
                    (remote ? " (2 SSH hosts)" : " (local)"),
                "the message names rank 1 as stopped, before the rank that timed out", ms, 0,
                "nothing"});
}

TEST_CASE("ProxyCommand in ssh_config is refused by name") {
  TempDir tmp("sec");
  const std::string config = tmp.path() + "/config";
  write_text(config,
             "Host viacommand\n  HostName 127.0.0.2\n  ProxyCommand ssh -W %h:%p bastion\n"
             "Host direct\n  HostName 127.0.0.4\n  ProxyCommand none\n  Port " +
                 std::to_string(unused_port()) + "\n");
  CapturedProcess check({hvdrun_binary(), "check", "--ssh-config", config, "-H",
                         "viacommand,direct", "--start-timeout", "5"});
  CHECK(check.wait() == 255);
  INFO("stdout: " << check.out << "\nstderr: " << check.err);
  CHECK(check.out.find("unsupported  -        ProxyCommand is not supported (ssh_config has "
                       "'ProxyCommand ssh -W %h:%p bastion' for viacommand)") != std::string::npos);
  CHECK(check.out.find("fix: run hvdrun on a machine that reaches the host directly") !=
        std::string::npos);
  // `ProxyCommand none` is a direct connection: refused by the closed port, not the keyword.
  CHECK(check.out.find("refused") != std::string::npos);
  CHECK(count(check.out, "unsupported") == 1);
}

TEST_CASE("ProxyJump reaches a host through a jump host's direct-tcpip channel") {
  TempDir tmp("sec");
  const SshdCluster& c = cluster();
  // node2's address, reached only through node1; and a port nothing listens on, likewise.
  const std::string common = "  User root\n  IdentityFile " + c.user_key() +
                             "\n  IdentitiesOnly yes\n  UserKnownHostsFile " + c.known_hosts() +
                             "\n  StrictHostKeyChecking accept-new\n  ProxyJump node1\n";
  const std::string config = tmp.path() + "/config";
  write_text(config, "Host behind\n  HostName " + c.address(2) + "\n  Port " +
                         std::to_string(c.port()) + "\n" + common + "Host nothere\n  HostName " +
                         c.address(2) + "\n  Port " + std::to_string(unused_port()) + "\n" +
                         common + "Include " + c.ssh_config() + "\n");
  CapturedProcess check({hvdrun_binary(), "check", "--ssh-config", config, "-H", "behind,nothere"});
  CHECK(check.wait() == 255);
  INFO("check: " << check.out << check.err);
  CHECK(check.out.find(c.address(2) + ":" + std::to_string(c.port()) + " via node1") !=
        std::string::npos);
  CHECK(count(check.out, "  ok  ") == 1);
  CHECK(check.out.find("the jump host node1 could not connect to " + c.address(2)) !=
        std::string::npos);

  // A job on the host behind the jump: while it runs, node1 serves the jump's session.
  Hvdrun h({"--ssh-config", config, "-H", "behind:1", "-np", "1", "sh", "-c",
            "echo on $HVDRUN_HOSTNAME; exec sleep 30"});
  h.read_until([](const std::string& out) { return out.find("on behind\n") != std::string::npos; },
               20s * kSlowdown);
  CHECK(!c.session_pids(1).empty());
  h.signal(SIGINT);
  CHECK(h.wait() == 130);

  // Ranks behind the jump and beside it find each other through the rendezvous.
  Hvdrun job({"--ssh-config", config, "-H", "behind:1,node1:1", "-np", "2", kWorker, "barrier"});
  CHECK(job.wait(30s * kSlowdown) == 0);
  INFO("job: " << job.err);
}

TEST_CASE(
    "what a local rank started in its own session ends with hvdrun even when its agent "
    "was killed") {
  // The agent alone (its guard then empties the job's cgroup), or its whole process group,
  // guard included (hvdrun, as it exits, removes the cgroup its agent left).
  const bool whole_group = GENERATE(false, true);
  TempDir tmp("sec");
  const std::string& d = tmp.path();
  const std::string script = "setsid sh -c 'echo $$ > " + d + "/d1.tmp && mv " + d + "/d1.tmp " +
                             d +
                             "/d1; exec sleep 300' </dev/null >/dev/null 2>&1 & "
                             "echo $$ > " +
                             d + "/r.tmp && mv " + d + "/r.tmp " + d + "/r; exec sleep 300";
  Hvdrun h({"-np", "1", "sh", "-c", script});
  const pid_t daemon = read_pid_file(d + "/d1");
  const pid_t rank = read_pid_file(d + "/r");
  // The rank's parent is the local agent: kill it as the OOM killer would.
  const std::string stat = read_file("/proc/" + std::to_string(rank) + "/stat");
  const pid_t agent =
      static_cast<pid_t>(std::strtol(stat.c_str() + stat.rfind(')') + 4, nullptr, 10));
  REQUIRE(agent > 1);
  REQUIRE(agent != h.pid());
  const pid_t launcher = h.pid();
  ::kill(whole_group ? -agent : agent, SIGKILL);
  CHECK(h.wait() == 255);
  INFO("stderr: " << h.err);
  CHECK(h.err.find("the agent on host localhost ended unexpectedly") != std::string::npos);
  const bool gone = wait_none_alive({daemon, rank}, 5s * kSlowdown);
  if (alive(daemon)) ::kill(daemon, SIGKILL);
  CHECK(gone);
  // Nothing of the job's is left in the cgroup tree either (where there is a job cgroup).
  CHECK(job_cgroups_of(launcher).empty());
}
