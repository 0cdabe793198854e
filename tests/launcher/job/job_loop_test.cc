// The job's state machine against scripted agents (FakeAgentLink) and a fake clock: no
// process, no real waiting. Start, first failure, teardown, heartbeats, the start
// deadline, interrupts.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "common/fd.h"
#include "common/peer_loss.h"
#include "launcher/job/job.h"
#include "rendezvous/server.h"
#include "tests/launcher/fake_job.h"

using namespace hvdrun;
using namespace hvdrun::launcher;
using hvdrun::testing::FakeAgentLink;
using hvdrun::testing::FakeAgentRecord;
using hvdrun::testing::FakeAgentScript;
using hvdrun::testing::FakeJobClock;
using namespace std::chrono_literals;

namespace {

char kPath[] = "PATH=/usr/bin:/bin";
char kHome[] = "HOME=/home/launcher";
char* kEnviron[] = {kPath, kHome, nullptr};

std::string contents(int fd) {
  std::string s(static_cast<std::size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  REQUIRE(::pread(fd, s.data(), s.size(), 0) == static_cast<ssize_t>(s.size()));
  return s;
}

// One job over fake agents: `scripts` by host name; hosts are localhost:2 and far-node:2
// unless `hosts` says otherwise.
struct FakeJob {
  std::map<std::string, FakeAgentScript> scripts;
  std::map<std::string, std::shared_ptr<FakeAgentRecord>> records;
  std::vector<hostfile::HostSlots> hosts = {{"localhost", 2}, {"far-node", 2}};
  FakeJobClock clock;
  JobContext ctx;
  UniqueFd out{::memfd_create("out", MFD_CLOEXEC)};
  UniqueFd err{::memfd_create("err", MFD_CLOEXEC)};
  int code = -1;
  // Changes the options and hooks before the run (elastic cases).
  std::function<void(LaunchOptions&, JobHooks&)> setup;
  // Elastic cases: from this question on, discovery lists the job's hosts again (0: never).
  int back_after = 0;

  FakeJob() {
    ctx.environment = kEnviron;
    ctx.cwd = "/work";
    ctx.stdout_fd = out.get();
    ctx.stderr_fd = err.get();
  }

  int run() {
    LaunchOptions o;
    o.hosts = hosts;
    o.command = {"python", "train.py"};
    JobHooks hooks;
    auto link = [this](const std::string& host) -> std::unique_ptr<AgentLink> {
      auto record = std::make_shared<FakeAgentRecord>();
      records[host] = record;
      return std::make_unique<FakeAgentLink>(scripts[host], record);
    };
    hooks.test.local_link = link;
    hooks.remote_link = link;
    ctx.clock = &clock;
    if (setup) setup(o, hooks);
    code = run_job(make_plan(o), o, hooks, ctx);
    return code;
  }
  std::string stdout_text() const { return contents(out.get()); }
  std::string stderr_text() const { return contents(err.get()); }
};

}  // namespace

TEST_CASE("job loop: ranks that all exit 0 end the job with 0, each spawned once") {
  FakeJob job;
  job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
  job.scripts["far-node"].exit_codes = {{2, 0}, {3, 0}};
  job.scripts["far-node"].output = "hello\n";
  CHECK(job.run() == 0);
  REQUIRE(job.records["localhost"]->spawns.size() == 2);
  REQUIRE(job.records["far-node"]->spawns.size() == 2);
  const auto& spawn = job.records["far-node"]->spawns[1];
  CHECK(spawn.rank == 3);
  CHECK(spawn.cwd == "/work");
  CHECK(spawn.argv == std::vector<std::string>{"python", "train.py"});
  auto has = [&](const std::string& entry) {
    return std::find(spawn.env.begin(), spawn.env.end(), entry) != spawn.env.end();
  };
  CHECK(has("HVDRUN_RANK=3"));
  CHECK(has("HVDRUN_HOSTNAME=far-node"));
  CHECK(has("PATH=/usr/bin:/bin"));         // forwarded to a remote host
  CHECK_FALSE(has("HOME=/home/launcher"));  // not forwarded
  CHECK(job.records["localhost"]->kills == 0);
  CHECK(job.stdout_text() == "[2]<stdout>:hello\n[3]<stdout>:hello\n");
  CHECK(job.stderr_text().empty());
}

TEST_CASE("job loop: a host is read only when its link reported something") {
  // One host answers; 100 stay silent until the start deadline. A loop that read every
  // host whenever any one had news would read each silent host on every such turn: a
  // launch of N hosts would cost N reads per event, N^2 in all.
  FakeJob job;
  job.hosts = {{"talker", 1}};
  job.scripts["talker"].exit_codes = {};  // its rank runs until the teardown
  for (int i = 0; i < 100; ++i) {
    const std::string name = "silent" + std::to_string(i);
    job.hosts.push_back({name, 1});
    job.scripts[name].answers = false;
  }
  CHECK(job.run() == 255);  // the silent hosts' ranks never start
  CHECK(job.records["talker"]->spawns.size() == 1);
  int idle = 0;
  for (const auto& [host, record] : job.records) {
    if (host != "talker") idle += record->idle_reads;
  }
  CHECK(idle == 0);
}

TEST_CASE("job loop: the first failure stops every agent and decides the exit code") {
  FakeJob job;
  job.scripts["far-node"].exit_codes = {{3, 7}};
  job.scripts["far-node"].stderr_tail = {"Traceback (most recent call last):", "ValueError: bad"};
  CHECK(job.run() == 7);
  CHECK(job.records["localhost"]->kills == 1);
  CHECK(job.records["far-node"]->kills == 1);
  const std::string err = job.stderr_text();
  CHECK_THAT(err, Catch::StartsWith("hvdrun: rank 3 on host far-node exited with code 7; stopped "
                                    "the other 3 running ranks\n"));
  CHECK_THAT(err, Catch::Contains("    ValueError: bad\n"));
  // The ranks the teardown killed do not replace the first failure.
  CHECK(err.find("SIGTERM") == std::string::npos);
}

TEST_CASE("job loop: a rank that failed because of a lost peer is not blamed for it") {
  // Rank 2 (far-node) reports first, saying its collective lost a peer; rank 1 (localhost)
  // exited 5 before it, but its report comes a heartbeat (1 s) later.
  const std::vector<std::string> victim = {
      "allreduce failed: hvdrun: allreduce #0 int32[1] failed on rank 2 of 4 (far-node): "
      "gloo: connection closed. " +
      std::string(kPeerLossSentence)};
  FakeJob job;
  job.scripts["far-node"].exit_codes = {{2, 1}};
  job.scripts["far-node"].rank_stderr_tail = {{2, victim}};
  job.scripts["localhost"].exit_codes = {{1, 5}};
  job.scripts["localhost"].exit_after_heartbeats = {{1, 1}};
  job.scripts["localhost"].rank_stderr_tail = {{1, {"bad input in shard 7"}}};
  CHECK(job.run() == 5);
  const std::string err = job.stderr_text();
  CHECK_THAT(err, Catch::StartsWith("hvdrun: rank 1 on host localhost exited with code 5; "
                                    "stopped the other 2 running ranks\n"));
  CHECK_THAT(err, Catch::Contains("    bad input in shard 7\n"));
  CHECK(err.find("rank 2 on host") == std::string::npos);
  // The teardown started with the culprit's report, not the victim's.
  CHECK(job.records["localhost"]->kills == 1);
  CHECK(job.clock.elapsed() >= 1s);
  CHECK(job.clock.elapsed() < job.ctx.peer_loss_wait);

  SECTION("without the wait, the first report is the job's failure, as before") {
    FakeJob now;
    now.ctx.peer_loss_wait = 0ms;
    now.scripts = job.scripts;
    CHECK(now.run() == 1);
    CHECK_THAT(now.stderr_text(), Catch::StartsWith("hvdrun: rank 2 on host far-node exited "
                                                    "with code 1; stopped the other 3"));
  }
}

TEST_CASE("job loop: a peer-loss failure is the job's when nothing else comes in time") {
  const std::vector<std::string> victim = {"RuntimeError: allreduce failed. " +
                                           std::string(kPeerLossSentence)};
  SECTION("the other ranks run on: the wait ends it") {
    FakeJob job;
    job.scripts["far-node"].exit_codes = {{3, 1}};
    job.scripts["far-node"].stderr_tail = victim;
    CHECK(job.run() == 1);
    CHECK_THAT(job.stderr_text(), Catch::StartsWith("hvdrun: rank 3 on host far-node exited with "
                                                    "code 1; stopped the other 3 running ranks"));
    CHECK(job.clock.elapsed() >= job.ctx.peer_loss_wait);
    CHECK(job.records["localhost"]->kills == 1);
  }
  SECTION("every other rank exits 0: no wait") {
    FakeJob job;
    job.ctx.heartbeat_timeout = 0s;
    job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
    job.scripts["far-node"].exit_codes = {{2, 0}, {3, 1}};
    job.scripts["far-node"].stderr_tail = victim;
    CHECK(job.run() == 1);
    CHECK_THAT(job.stderr_text(), Catch::StartsWith("hvdrun: rank 3 on host far-node exited with "
                                                    "code 1\n"));
    CHECK(job.clock.elapsed() < job.ctx.peer_loss_wait);
  }
  SECTION("a lost host explains it") {
    FakeJob job;
    job.ctx.heartbeat_timeout = 5s;
    job.ctx.peer_loss_wait = 10s;
    job.hosts = {{"localhost", 2}, {"far-node", 1}, {"silent", 1}};
    job.scripts["far-node"].exit_codes = {{2, 1}};
    job.scripts["far-node"].stderr_tail = victim;
    job.scripts["silent"].answers = false;
    CHECK(job.run() == 255);
    CHECK_THAT(job.stderr_text(),
               Catch::StartsWith("hvdrun: the agent on host silent ended unexpectedly"));
  }
}

TEST_CASE("job loop: a silent remote agent is lost after the heartbeat timeout, in fake time") {
  FakeJob job;
  job.ctx.heartbeat_timeout = 5s;
  job.ctx.heartbeat_interval = 1s;
  job.scripts["far-node"].answers = false;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(job.run() == 255);
  CHECK_THAT(job.stderr_text(), Catch::Contains("the agent on host far-node ended unexpectedly "
                                                "(nothing heard from it for 5 s"));
  CHECK(job.records["far-node"]->aborted);
  CHECK(job.clock.elapsed() >= 5s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("job loop: the start deadline names the hosts whose ranks did not start") {
  FakeJob job;
  job.ctx.heartbeat_timeout = 0s;  // only the start deadline can end it
  job.scripts["far-node"].starts = false;
  CHECK(job.run() == 255);
  const std::string err = job.stderr_text();
  CHECK_THAT(err, Catch::Contains("did not all start within --start-timeout 30 s"));
  CHECK_THAT(err, Catch::Contains("host far-node: 0 of 2 ranks started"));
  CHECK(job.clock.elapsed() >= 30s);
}

TEST_CASE("job loop: an interrupt stops all ranks and gives 128 + the signal") {
  FakeJob job;
  job.clock.interrupt_after(3, SIGINT);
  CHECK(job.run() == 130);
  CHECK_THAT(job.stderr_text(), Catch::Contains("interrupted by signal 2 (SIGINT)"));
  CHECK(job.records["localhost"]->kills == 1);
}

namespace {

// A job of localhost:2 and far-node:2 whose ranks declared the elastic API, with discovery
// answering `answer` from its `after`-th question on (and the hosts of the job before, and
// from job.back_after on).
void elastic_job(FakeJob& job, int min_np, const std::vector<hostfile::HostSlots>& answer,
                 int after, std::vector<std::string>& said) {
  job.scripts["localhost"].elastic = job.scripts["far-node"].elastic = true;
  job.setup = [&job, min_np, answer, after, &said](LaunchOptions& o, JobHooks& hooks) {
    o.elastic.min_np = min_np;
    o.elastic.max_np = 4;
    o.elastic.elastic_timeout_s = 30;
    hooks.reform = [](const Failure&) { return std::optional<JobHooks::Reform>(); };
    hooks.open_hosts = [](const std::vector<std::string>&) {
      return std::vector<JobHooks::OpenedHost>{};
    };
    auto asked = std::make_shared<int>(0);
    hooks.grow = [hosts = job.hosts, answer, after, back = job.back_after,
                  asked]() -> std::optional<std::vector<hostfile::HostSlots>> {
      ++*asked;
      return *asked >= after && (back == 0 || *asked < back) ? answer : hosts;
    };
    hooks.reformed = [&said](int, int size, int kept, int started, const std::string& why) {
      said.push_back(why + " -> " + std::to_string(size) + " (" + std::to_string(kept) + " kept, " +
                     std::to_string(started) + " started)");
    };
    // The fake agents' ranks never reach a rendezvous: every generation counts as formed
    // (its ranks checked in at once), as in a job whose ranks train.
    hooks.test.on_rendezvous = [](rendezvous::Server& server) {
      for (int g = 0; g < 64; ++g) server.set("hvdrun/g" + std::to_string(g) + "/ready", "1");
    };
  };
}

}  // namespace

TEST_CASE("job loop: in process, a host discovery drops retires its ranks, unblamed") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job(job, 2, {{"localhost", 2}}, 3, said);
  // The kept ranks end the job cleanly a while after the host left.
  job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
  job.scripts["localhost"].exit_after_heartbeats = {{0, 3}, {1, 3}};
  CHECK(job.run() == 0);
  REQUIRE(job.records["far-node"]->regenerates.size() == 1);
  const auto& far = job.records["far-node"]->regenerates[0];
  CHECK(far.generation == 1);
  CHECK(far.size == 2);
  CHECK_FALSE(far.failure);  // at the next commit
  CHECK(far.hosts_removed);
  CHECK_FALSE(far.hosts_added);
  CHECK(far.ranks == std::vector<proto::RankPlacement>{{2, -1, 0, 0, 0, 0}, {3, -1, 0, 0, 0, 0}});
  const auto& local = job.records["localhost"]->regenerates.at(0);
  CHECK(local.ranks == std::vector<proto::RankPlacement>{{0, 0, 0, 2, 0, 1}, {1, 1, 1, 2, 0, 1}});
  CHECK(said == std::vector<std::string>{"discovery no longer lists far-node (processes 2, 3): "
                                         "they leave the job at the next commit -> 2 (2 kept, 0 "
                                         "started)"});
  CHECK(job.records["localhost"]->kills == 0);
  CHECK(job.records["far-node"]->kills == 0);
  CHECK(job.stderr_text().empty());
}

TEST_CASE(
    "job loop: in process, a host that leaves below --min-np keeps its ranks, then the "
    "job ends after --elastic-timeout") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job(job, 3, {{"localhost", 2}}, 2, said);
  CHECK(job.run() == 255);
  CHECK(job.records["far-node"]->regenerates.empty());
  CHECK(said.empty());
  CHECK(job.clock.elapsed() >= 30s);
  CHECK_THAT(job.stderr_text(),
             Catch::StartsWith("hvdrun: elastic: discovery no longer lists far-node (processes 2, "
                               "3), and discovery has listed "
                               "only 2 usable slots for --min-np 3 for 30 s (--elastic-timeout); "
                               "ending the job\n"));
}

TEST_CASE("job loop: in process, a host that lost slots retires its highest ranks") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job(job, 1, {{"localhost", 1}, {"far-node", 2}}, 2, said);
  job.scripts["far-node"].exit_codes = {{2, 0}, {3, 0}};
  job.scripts["far-node"].exit_after_heartbeats = {{2, 3}, {3, 3}};
  job.scripts["localhost"].exit_codes = {{0, 0}};
  job.scripts["localhost"].exit_after_heartbeats = {{0, 3}};
  CHECK(job.run() == 0);
  const auto& local = job.records["localhost"]->regenerates.at(0);
  CHECK(local.ranks == std::vector<proto::RankPlacement>{{0, 0, 0, 1, 0, 2}, {1, -1, 0, 0, 0, 0}});
  CHECK(local.size == 3);
  CHECK(said == std::vector<std::string>{"discovery lists localhost with 1 slot, 2 ranks run "
                                         "there (process 1): it leaves the job at the next "
                                         "commit -> 3 (3 kept, 0 started)"});
}

TEST_CASE("job loop: in process, a host listed again after it left takes new processes") {
  FakeJob job;
  std::vector<std::string> said;
  job.back_after = 6;
  elastic_job(job, 2, {{"localhost", 2}}, 3, said);
  job.scripts["far-node"].exit_codes = {{2, 0}, {3, 0}};
  job.scripts["far-node"].exit_after_heartbeats = {{2, 8}, {3, 8}};
  job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
  job.scripts["localhost"].exit_after_heartbeats = {{0, 8}, {1, 8}};
  CHECK(job.run() == 0);
  // Processes 2 and 3 retired at generation 1, then started anew at generation 2.
  const auto& far = *job.records["far-node"];
  REQUIRE(far.spawns.size() == 4);
  CHECK(far.spawns[2].rank == 2);
  CHECK(far.spawns[3].rank == 3);
  REQUIRE(far.regenerates.size() == 2);
  CHECK(far.regenerates[1].generation == 2);
  CHECK(far.regenerates[1].hosts_added);
  CHECK_FALSE(far.regenerates[1].hosts_removed);
  CHECK(far.regenerates[1].ranks.empty());  // nothing of it was running
  CHECK(job.records["localhost"]->regenerates.at(1).size == 4);
  REQUIRE(said.size() == 2);
  CHECK(said[1] == "discovery found 2 more slots -> 4 (2 kept, 2 started)");
  CHECK(job.stderr_text().empty());
}

TEST_CASE("job loop: in process, a host that goes away with its retiring ranks is no failure") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job(job, 2, {{"localhost", 2}}, 3, said);
  job.scripts["far-node"].gone_on_retire = true;
  job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
  job.scripts["localhost"].exit_after_heartbeats = {{0, 3}, {1, 3}};
  CHECK(job.run() == 0);
  REQUIRE(said.size() == 1);  // the retirement; no re-formation after a failure
  CHECK(job.records["localhost"]->kills == 0);
  CHECK(job.stderr_text().empty());
}

namespace {

// elastic_job, with hooks.scale answering `refuse` (nullopt: go on) and a re-formation that
// keeps every host, where elastic_job's ends the job.
void elastic_job_with(FakeJob& job, int min_np, const std::vector<hostfile::HostSlots>& answer,
                      int after, std::vector<std::string>& said,
                      const std::optional<std::string>& refuse = std::nullopt) {
  elastic_job(job, min_np, answer, after, said);
  job.setup = [base = job.setup, refuse](LaunchOptions& o, JobHooks& hooks) {
    base(o, hooks);
    hooks.reform = [](const Failure&) {
      return std::optional<JobHooks::Reform>(JobHooks::Reform{});
    };
    hooks.scale = [refuse] { return refuse; };
  };
}

}  // namespace

// Horovod's elastic driver stops once a worker succeeded: the program is over, and a
// re-formation would start it again in the processes that finished.
TEST_CASE("job loop: in process, after a rank finished a failure ends the job, nothing restarts") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job_with(job, 1, {{"localhost", 2}, {"far-node", 2}}, 1000, said);
  job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
  job.scripts["far-node"].exit_codes = {{2, 3}};
  job.scripts["far-node"].exit_after_heartbeats = {{2, 3}};
  CHECK(job.run() == 3);
  CHECK(said.empty());
  CHECK(job.records["localhost"]->spawns.size() == 2);  // each once: none started again
  CHECK(job.records["localhost"]->regenerates.empty());
  CHECK(job.records["far-node"]->regenerates.empty());
  CHECK_THAT(job.stderr_text(), Catch::Contains("rank 2 on host far-node exited with code 3"));
}

TEST_CASE("job loop: in process, after a rank finished discovery's changes are not followed") {
  FakeJob job;
  std::vector<std::string> said;
  job.back_after = 6;
  elastic_job_with(job, 1, {{"localhost", 2}}, 3, said);
  job.scripts["localhost"].exit_codes = {{0, 0}, {1, 0}};
  job.scripts["far-node"].exit_codes = {{2, 0}, {3, 0}};
  job.scripts["far-node"].exit_after_heartbeats = {{2, 8}, {3, 8}};
  CHECK(job.run() == 0);
  CHECK(said.empty());  // neither the retirement nor the growth after it
  CHECK(job.records["far-node"]->spawns.size() == 2);
  CHECK(job.records["far-node"]->regenerates.empty());
  CHECK(job.stderr_text().empty());
}

TEST_CASE("job loop: in process, a change of hosts the reset limit refuses ends the job") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job_with(job, 1, {{"localhost", 2}}, 3, said, "elastic: the reset limit is used up");
  CHECK(job.run() == 255);
  CHECK(said.empty());
  CHECK(job.records["far-node"]->regenerates.empty());
  CHECK_THAT(job.stderr_text(), Catch::Contains("hvdrun: elastic: the reset limit is used up\n"));
}

TEST_CASE(
    "job loop: in process, a growth the reset limit refuses starts nothing and ends the job") {
  FakeJob job;
  std::vector<std::string> said;
  elastic_job_with(job, 1, {{"localhost", 2}, {"far-node", 3}}, 2, said,
                   "elastic: the reset limit is used up");
  job.setup = [base = job.setup](LaunchOptions& o, JobHooks& hooks) {
    base(o, hooks);
    o.elastic.max_np = 5;  // room for the slot far-node lists beyond its two processes
  };
  CHECK(job.run() == 255);
  CHECK(said.empty());
  CHECK(job.records["far-node"]->spawns.size() == 2);
  CHECK(job.records["far-node"]->regenerates.empty());
  CHECK(job.clock.elapsed() < 10s);  // the teardown waits for no process that never started
  CHECK_THAT(job.stderr_text(), Catch::Contains("hvdrun: elastic: the reset limit is used up\n"));
}
