// run_job in-process against agents that misbehave (never answer, die, go silent, print
// garbage) and against the real agent reached through the remote-host seam.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "launcher/job/job.h"
#include "rendezvous/server.h"

using namespace hvdrun;
using namespace hvdrun::launcher;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kHvdrun = HVDRUN_BINARY_DIR "/cli/hvdrun";

struct Result {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

std::string contents(int fd) {
  std::string s(static_cast<std::size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  REQUIRE(::pread(fd, s.data(), s.size(), 0) == static_cast<ssize_t>(s.size()));
  return s;
}

// Runs a job with the real clock and agents, its output going to memory files through
// the job's context (no swapping of this process's stdout and stderr).
Result run(const LaunchOptions& o, const JobHooks& hooks, JobContext ctx = process_context()) {
  UniqueFd out(::memfd_create("out", MFD_CLOEXEC)), err(::memfd_create("err", MFD_CLOEXEC));
  SystemJobClock clock;
  ctx.clock = &clock;
  ctx.stdout_fd = out.get();
  ctx.stderr_fd = err.get();
  Result r;
  auto t0 = Clock::now();
  r.code = run_job(make_plan(o), o, hooks, ctx);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.out = contents(out.get());
  r.err = contents(err.get());
  return r;
}

// A fake agent: a shell script standing where `hvdrun agent` should be.
struct FakeAgent {
  std::string path;
  explicit FakeAgent(const std::string& body) {
    char tmpl[] = "/tmp/hvdrun-fake-agent-XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    path = tmpl;
    std::string script = "#!/bin/sh\n" + body + "\n";
    REQUIRE(::write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size()));
    ::close(fd);
    ::chmod(path.c_str(), 0755);
  }
  ~FakeAgent() { ::unlink(path.c_str()); }
};

LaunchOptions options(int np, std::vector<std::string> command) {
  LaunchOptions o;
  o.np = np;
  o.command = std::move(command);
  return o;
}

}  // namespace

TEST_CASE("job: an agent that never answers fails the launch at --start-timeout") {
  FakeAgent agent("exec sleep 60");
  LaunchOptions o = options(2, {"true"});
  o.start_timeout_s = 1;
  JobHooks hooks;
  hooks.test.agent_exe = agent.path;
  Result r = run(o, hooks);
  CHECK(r.code == 255);
  CHECK_THAT(r.err, Catch::Contains("did not all start within --start-timeout 1 s"));
  CHECK_THAT(r.err, Catch::Contains("host localhost: its agent did not answer"));
  CHECK(r.seconds < 5);
}

TEST_CASE("job: an agent that dies is a failure naming the host") {
  FakeAgent agent("exit 3");
  JobHooks hooks;
  hooks.test.agent_exe = agent.path;
  Result r = run(options(2, {"true"}), hooks);
  CHECK(r.code == 255);
  CHECK_THAT(r.err, Catch::Contains(
                        "the agent on host localhost ended unexpectedly (it exited with code 3)"));
  CHECK_THAT(r.err, Catch::Contains("ranks 0, 1 were running"));
}

TEST_CASE("job: an agent that goes silent is caught by the heartbeat timeout") {
  FakeAgent agent("exec sleep 60");
  ::setenv("HVDRUN_HEARTBEAT_TIMEOUT", "0.5", 1);
  JobContext ctx = process_context();  // reads HVDRUN_HEARTBEAT_TIMEOUT
  ::unsetenv("HVDRUN_HEARTBEAT_TIMEOUT");
  JobHooks hooks;
  hooks.test.agent_exe = agent.path;
  Result r = run(options(1, {"true"}), hooks, ctx);
  CHECK(r.code == 255);
  CHECK_THAT(r.err, Catch::Contains("nothing heard from it for 0.5 s"));
  CHECK(r.seconds < 4);
}

TEST_CASE("job: an agent stream polluted by a login banner is named as such") {
  FakeAgent agent("echo 'Welcome to the cluster!'; exec cat > /dev/null");
  JobHooks hooks;
  hooks.test.agent_exe = agent.path;
  Result r = run(options(1, {"true"}), hooks);
  CHECK(r.code == 255);
  CHECK_THAT(r.err, Catch::Contains("Welcome to the cluster!"));
  CHECK_THAT(r.err, Catch::Contains("login script"));
}

TEST_CASE("job: an error on the rendezvous server's thread ends the job with its cause") {
  JobHooks hooks;
  hooks.test.agent_exe = kHvdrun;
  hooks.test.on_rendezvous = [](rendezvous::Server& server) {
    server.post([] { throw std::runtime_error("the store ran out of room"); });
  };
  Result r = run(options(2, {"sleep", "30"}), hooks);
  CHECK(r.code == 255);
  CHECK_THAT(r.err, Catch::Contains("the rendezvous server failed: the store ran out of room; "
                                    "stopped the job"));
  CHECK(r.seconds < 10);
}

TEST_CASE("job: a remote host without a transport is a launch error") {
  LaunchOptions o = options(1, {"true"});
  o.hosts = {{"node-that-is-not-here", 1}};
  JobHooks hooks;
  hooks.test.agent_exe = kHvdrun;
  CHECK_THROWS_AS(run(o, hooks), LaunchError);
}

TEST_CASE(
    "job: with --network-interface the Horovod rendezvous admits the job's addresses, "
    "not the interface's network") {
  // One "remote" host whose agent runs here; the Horovod server takes every caller for
  // another host, so the allow-list alone decides. The job's host is 127.0.0.1 (its link's
  // address) and so is lo's own address; 127.0.0.77 shares lo's network 127.0.0.0/8 but is
  // no host of the job.
  const std::string ask =
      "import http.client, os\n"
      "def status(source):\n"
      "    c = http.client.HTTPConnection(os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR'],\n"
      "        int(os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT']), timeout=10,\n"
      "        source_address=(source, 0))\n"
      "    c.request('GET', '/global/0')\n"
      "    return c.getresponse().status\n"
      "print('from', status('127.0.0.77'), status('127.0.0.1'))\n";
  LaunchOptions o = options(1, {"python3", "-c", ask});
  o.hosts = {{"far-away-node", 1}};
  o.network_interface = "lo";
  JobHooks hooks;
  hooks.test.agent_exe = kHvdrun;
  hooks.remote_link = [&](const std::string&) { return start_local_agent(kHvdrun); };
  hooks.test.horovod_peers = [](int) -> std::optional<unsigned> { return std::nullopt; };
  Result r = run(o, hooks);
  INFO(r.err);
  CHECK(r.code == 0);
  // 403: not one of the job's hosts; 404: served (no such key yet).
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:from 403 404\n"));
}

TEST_CASE("job: remote hosts get the forwarded environment through their link") {
  // The "remote" agent runs here, so its own environment (its host's) is this process's:
  // a remote rank takes HOME from it (a login variable) but not LAUNCHER_ONLY, which is
  // neither a login variable nor forwarded.
  LaunchOptions o = options(
      3, {"sh", "-c",
          "echo \"$HVDRUN_RANK $HVDRUN_HOSTNAME ${HOME:-unset} ${LAUNCHER_ONLY:-unset} $EXTRA\""});
  o.hosts = {{"localhost", 1}, {"far-away-node", 2}};
  o.env = {"EXTRA=with spaces"};
  JobHooks hooks;
  hooks.test.agent_exe = kHvdrun;
  std::vector<std::string> asked;
  hooks.remote_link = [&](const std::string& host) {
    asked.push_back(host);
    return start_local_agent(kHvdrun);
  };
  ::setenv("HOME", "/root-for-test", 1);
  ::setenv("LAUNCHER_ONLY", "yes", 1);
  Result r = run(o, hooks);
  ::unsetenv("LAUNCHER_ONLY");
  CHECK(r.code == 0);
  CHECK(asked == std::vector<std::string>{"far-away-node"});
  CHECK_THAT(r.out, Catch::Contains("[0]<stdout>:0 localhost /root-for-test yes with spaces\n"));
  CHECK_THAT(r.out,
             Catch::Contains("[1]<stdout>:1 far-away-node /root-for-test unset with spaces\n"));
  CHECK_THAT(r.out,
             Catch::Contains("[2]<stdout>:2 far-away-node /root-for-test unset with spaces\n"));
}
