// Elastic mode end to end on the loopback SSH cluster (sshd on 127.0.0.k, aliases
// node1..nodeN): a host lost mid-job, excluded for its cooldown and taken back; a rank that
// always fails, against the reset limit; too few slots for --min-np; hosts added to the
// discovery output (also to a job started at -np, with silent ranks); a discovery script
// that prints garbage; daemons the discovery script leaves behind (on this machine alone).
// Every case checks that nothing of any generation is left running. docs/elastic.md
// describes the behaviour.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/processes.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using testing::count;
using testing::Hvdrun;
constexpr int kSlow = testing::kSlowdown;

namespace {

testing::SshdCluster& cluster() {
  static testing::SshdCluster c(3);
  return c;
}

// A discovery script that prints the file `hosts` next to it: tests change the hosts
// there are by rewriting that file.
struct Discovery {
  explicit Discovery(const std::string& hosts) {
    write_hosts(hosts);
    std::ofstream(script) << "#!/bin/sh\nexec cat " << dir.path() << "/hosts\n";
    ::chmod(script.c_str(), 0755);
  }
  void write_hosts(const std::string& hosts) const {
    const std::string tmp = dir.path() + "/hosts.new";
    std::ofstream(tmp) << hosts;
    std::rename(tmp.c_str(), (dir.path() + "/hosts").c_str());
  }
  testing::TempDir dir{"elastic"};
  std::string script = dir.path() + "/discover.sh";
};

// Every rank writes its pid and its agent's pid as pid.G.R / agent.G.R, says "up G", and
// then runs `then` (a shell command).
std::string rank_script(const std::string& dir, const std::string& then) {
  return "g=$HVDRUN_GENERATION; echo $$ > " + dir + "/pid.$g.$HVDRUN_RANK; echo $PPID > " + dir +
         "/agent.$g.$HVDRUN_RANK; echo \"up $g $HVDRUN_HOSTNAME\"; " + then;
}

std::vector<std::string> elastic_args(const Discovery& d, std::vector<std::string> more) {
  std::vector<std::string> args = {"--ssh-config", cluster().ssh_config(),
                                   "--host-discovery-script", d.script};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

TEST_CASE("elastic: a lost host is excluded for its cooldown, the job goes on and takes it back") {
  Discovery d("node1:1\nnode2:1\nnode3:1\n");
  const std::string marker = testing::unique_marker();
  const std::string dir = d.dir.path();
  Hvdrun h(elastic_args(d, {"--min-np", "2", "--blacklist-cooldown-range", "3", "6", "-x",
                            marker.substr(0, marker.find('=')), "sh", "-c",
                            rank_script(dir, "[ $g = 2 ] && exit 0; exec sleep 60")}),
           {marker, "HVDRUN_DISCOVERY_INTERVAL=0.3"});
  h.read_until([](const std::string& out) { return count(out, "up 0 ") == 3; }, 20s * kSlow);
  // Rank 1 runs on node2: kill its agent, as a lost host looks to the launcher.
  const pid_t agent = testing::read_pid_file(dir + "/agent.0.1");
  const auto gen0 = testing::read_pid_files(dir, "pid.0.", 3);
  const auto t0 = Clock::now();
  REQUIRE(::kill(agent, SIGKILL) == 0);
  h.read_until([](const std::string& out) { return count(out, "up 1 ") == 2; }, 20s * kSlow);
  const double restart_ms = testing::ms_since(t0);
  CHECK(testing::wait_none_alive(gen0, 5s * kSlow));
  // After the cooldown node2 is back: generation 2 has 3 ranks and they end the job.
  CHECK(h.wait(30s * kSlow) == 0);
  INFO("stderr: " << h.err);
  CHECK_THAT(h.err, Catch::Contains("generation 1 starts with 2 ranks on node1:1, node3:1; "
                                    "excluded: node2 until"));
  CHECK_THAT(h.err, Catch::Contains("usable slots for a job of 2 ranks; stopping generation 1 "
                                    "to grow"));
  CHECK_THAT(h.err, Catch::Contains("generation 2 starts with 3 ranks"));
  CHECK(count(h.out, "up 1 node2") == 0);
  CHECK(count(h.out, "up 2 ") == 3);
  CHECK(testing::wait_none_with(marker, 5s * kSlow));
  testing::report_fault({"elastic: a host's agent SIGKILLed (3 hosts, --min-np 2)",
                         "next generation runs on the 2 others; the host back after its cooldown",
                         restart_ms, 0, "the generation's work since its last checkpoint"});
  CHECK(restart_ms < 5000.0 * kSlow);
}

TEST_CASE("elastic: a rank that always fails is restarted exactly --reset-limit times") {
  Discovery d("node1:1\nnode2:1\nnode3:1\n");
  const std::string marker = testing::unique_marker();
  const std::string rank =
      "echo run $HVDRUN_GENERATION; [ $HVDRUN_RANK = 0 ] && exit 7; exec sleep 60";
  Hvdrun h(elastic_args(d, {"--min-np", "1", "--max-np", "2", "--reset-limit", "2", "-x",
                            marker.substr(0, marker.find('=')), "sh", "-c", rank}),
           {marker});
  CHECK(h.wait(60s * kSlow) == 7);
  INFO("stderr: " << h.err);
  // Rank 0 runs in every generation and prints before it fails (rank 1 may be stopped
  // before it prints).
  for (const char* g : {"0", "1", "2"})
    CHECK(count(h.out, std::string("[0]<stdout>:run ") + g + "\n") == 1);
  CHECK(count(h.out, "<stdout>:run 3\n") == 0);
  CHECK_THAT(h.err, Catch::Contains("the reset limit (--reset-limit 2) is used up; ending with "
                                    "the last failure's exit code 7"));
  CHECK(count(h.err, "hvdrun: rank 0 on host ") == 3);
  CHECK(testing::wait_none_with(marker, 5s * kSlow));
}

TEST_CASE("elastic: fewer usable slots than --min-np end the job at once, naming what was lost") {
  Discovery d("node1:1\nnode2:1\n");
  const std::string marker = testing::unique_marker();
  const std::string dir = d.dir.path();
  Hvdrun h(elastic_args(d, {"--min-np", "2", "-x", marker.substr(0, marker.find('=')), "sh", "-c",
                            rank_script(dir, "exec sleep 60")}),
           {marker});
  h.read_until([](const std::string& out) { return count(out, "up 0 ") == 2; }, 20s * kSlow);
  REQUIRE(::kill(testing::read_pid_file(dir + "/agent.0.1"), SIGKILL) == 0);
  CHECK(h.wait(20s * kSlow) == 255);
  CHECK_THAT(h.err, Catch::Contains("only 1 usable slot left, fewer than --min-np 2; ending the "
                                    "job. Excluded hosts: node2 until"));
  CHECK(testing::wait_none_with(marker, 5s * kSlow));
}

TEST_CASE("elastic: hosts added to the discovery output grow the job at the next generation") {
  Discovery d("node1:1\n");
  const std::string dir = d.dir.path();
  const std::string marker = testing::unique_marker();
  Hvdrun h(
      elastic_args(d, {"--min-np", "1", "--max-np", "3", "-x", marker.substr(0, marker.find('=')),
                       "sh", "-c", rank_script(dir, "[ $g = 1 ] && exit 0; exec sleep 60")}),
      {marker, "HVDRUN_DISCOVERY_INTERVAL=0.3"});
  h.read_until([](const std::string& out) { return count(out, "up 0 ") == 1; }, 20s * kSlow);
  d.write_hosts("node1:1\nnode2:1\nnode3:1\n");
  CHECK(h.wait(30s * kSlow) == 0);
  INFO("stderr: " << h.err);
  CHECK(count(h.out, "up 1 ") == 3);
  CHECK_THAT(h.err, Catch::Contains("discovery found 3 usable slots for a job of 1 rank;"));
  CHECK(testing::wait_none_with(marker, 5s * kSlow));
}

// -np sizes the first generation only: a job started at -np 2 below --max-np 4 grows when
// discovery finds more slots. Its ranks print nothing, so nothing but the launcher's own
// timers drives its loop (the job used to stay in generation 0: the growth check capped the
// slots found at -np as if for the first generation).
TEST_CASE("elastic: a job started at -np below --max-np grows while its ranks are silent") {
  Discovery d("node1:2\n");
  const std::string dir = d.dir.path();
  const std::string marker = testing::unique_marker();
  const std::string rank = "g=$HVDRUN_GENERATION; echo $$ > " + dir +
                           "/pid.$g.$HVDRUN_RANK; [ $g = 1 ] && exit 0; exec sleep 60";
  Hvdrun h(elastic_args(d, {"-np", "2", "--min-np", "2", "--max-np", "4", "-x",
                            marker.substr(0, marker.find('=')), "sh", "-c", rank}),
           {marker, "HVDRUN_DISCOVERY_INTERVAL=0.3"});
  testing::read_pid_files(dir, "pid.0.", 2, 20s * kSlow);
  d.write_hosts("node1:2\nnode2:2\n");
  CHECK(h.wait(30s * kSlow) == 0);
  INFO("stderr: " << h.err);
  CHECK(testing::read_pid_files(dir, "pid.1.", 4, 1s).size() == 4);
  CHECK(h.out.empty());
  CHECK_THAT(h.err, Catch::Contains("discovery found 4 usable slots for a job of 2 ranks;"));
  CHECK(testing::wait_none_with(marker, 5s * kSlow));
}

TEST_CASE("elastic: a discovery script that prints garbage is reported and the job ends") {
  testing::TempDir dir("elastic");
  const std::string script = dir.path() + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\necho 'node1:many'\necho 'look here' >&2\n";
  ::chmod(script.c_str(), 0755);
  Hvdrun h({"--host-discovery-script", script, "--elastic-timeout", "1", "true"},
           {"HVDRUN_DISCOVERY_INTERVAL=0.3"});
  CHECK(h.wait(20s * kSlow) == 255);
  CHECK_THAT(h.err, Catch::Contains("line 1 ('node1:many')") &&
                        Catch::Contains("its stderr: look here; gave up after") &&
                        Catch::Contains(" s of failures (--elastic-timeout 1)"));
  // The time it names is the time it waited: never short of the timeout (it said "after
  // --elastic-timeout 5 s" at 3.0 s when the next try would have come too late).
  const auto at = h.err.find("gave up after ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(h.err.substr(at + 14)) >= 1.0);
}

// The launcher sweeps its children at the end of every generation (what a killed agent's
// ranks left behind); a discovery run still going then is the elastic loop's own and must
// survive it, or the next generation waits for a script that is gone until
// --elastic-timeout.
TEST_CASE("elastic: a discovery run in flight when a generation ends does not stall the next") {
  Discovery d("node1:1\nnode2:1\n");
  // Slower than the interval, so that a run is always going: the job loop starts the next
  // as soon as one ends.
  std::ofstream(d.script) << "#!/bin/sh\nsleep 1\nexec cat " << d.dir.path() << "/hosts\n";
  const std::string marker = testing::unique_marker();
  const std::string rank =
      "echo run $HVDRUN_GENERATION; [ $HVDRUN_GENERATION = 0 ] && [ $HVDRUN_RANK = 0 ] && exit 3; "
      "exit 0";
  Hvdrun h(elastic_args(d, {"--min-np", "1", "--elastic-timeout", "60", "-x",
                            marker.substr(0, marker.find('=')), "sh", "-c", rank}),
           {marker, "HVDRUN_DISCOVERY_INTERVAL=0.1"});
  const auto t0 = Clock::now();
  CHECK(h.wait(30s * kSlow) == 0);
  INFO("stderr: " << h.err);
  CHECK_THAT(h.err, Catch::Contains("generation 1 starts with"));
  CHECK(count(h.out, "run 1") >= 1);
  CHECK(testing::ms_since(t0) < 20000.0 * kSlow);
  CHECK(testing::wait_none_with(marker, 5s * kSlow));
}

// Issue #27, finding 7: the discovery script runs in the job's cleanup scope. A daemon it
// starts in a session of its own outlives the script; it must not outlive hvdrun, whether
// the run that started it came before the first generation or during one.
TEST_CASE("elastic: a daemon the discovery script starts with setsid ends with hvdrun") {
  testing::TempDir dir("elastic");
  const std::string& d = dir.path();
  // The daemons carry a marker in their environment that hvdrun's ranks do not have.
  const std::string marker = testing::unique_marker();
  const std::string script = d + "/discover.sh";
  std::ofstream(script) << "#!/bin/sh\nenv " << marker << " setsid sh -c 'echo $$ >> " << d
                        << "/daemons; exec sleep 300' </dev/null >/dev/null 2>&1 &\n"
                           "echo localhost:1\n";
  ::chmod(script.c_str(), 0755);
  // The rank waits for three discovery runs: the first before the generation, the others
  // during it (HVDRUN_DISCOVERY_INTERVAL), so that daemons of both kinds are running.
  const std::string rank =
      "while [ $(cat " + d + "/daemons 2>/dev/null | wc -l) -lt 3 ]; do " + "sleep 0.02; done";
  Hvdrun h({"--host-discovery-script", script, "--min-np", "1", "-np", "1", "sh", "-c", rank},
           {"HVDRUN_DISCOVERY_INTERVAL=0.1"});
  CHECK(h.wait(30s * kSlow) == 0);
  INFO("stderr: " << h.err);
  const auto t0 = Clock::now();
  CHECK(testing::lines(testing::read_file(d + "/daemons")).size() >= 3);
  const bool gone = testing::wait_none_with(marker, 5s * kSlow);
  const double ms = testing::ms_since(t0);
  const std::vector<pid_t> left = testing::processes_with(marker);
  for (pid_t p : left) ::kill(p, SIGKILL);
  CHECK(gone);
  testing::report_fault(
      {"the discovery script leaves setsid daemons (before and during a "
       "generation)",
       "adopted by hvdrun as subreaper and killed with the job; ms after "
       "hvdrun's exit",
       ms, static_cast<int>(left.size()), "nothing"});
}
