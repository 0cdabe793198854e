// hvdrun end to end with remote hosts: the loopback SSH cluster (sshd on 127.0.0.k, aliases
// node1..nodeN) plus this machine. Placement and environment per rank, tagged output, a
// failing remote rank, SIGINT with nothing left alive, a host that fails the preflight, a
// cwd with a space and -x values with quotes, the secret on no command line. Every wait
// has a deadline.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/fd.h"
#include "tests/support/sshd_cluster.h"

using namespace hvdrun;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

extern char** environ;

namespace {

const char* const kHvdrun = HVDRUN_BINARY_DIR "/cli/hvdrun";

testing::SshdCluster& cluster() {
  static testing::SshdCluster c(2);
  return c;
}

// One hvdrun run (in `cwd` when given) with its stdout and stderr collected.
class Hvdrun {
 public:
  explicit Hvdrun(std::vector<std::string> args, const std::string& cwd = {},
                  std::vector<std::string> extra_env = {}) {
    auto [out_r, out_w] = make_pipe();
    auto [err_r, err_w] = make_pipe();
    args.insert(args.begin(), kHvdrun);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (char** e = environ; *e; ++e) envp.push_back(*e);
    for (auto& e : extra_env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out_w.get(), 1);
      ::dup2(err_w.get(), 2);
      int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      ::execve(kHvdrun, argv.data(), envp.data());
      ::_exit(127);
    }
    out_ = std::move(out_r);
    err_ = std::move(err_r);
  }
  ~Hvdrun() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Hvdrun(const Hvdrun&) = delete;
  Hvdrun& operator=(const Hvdrun&) = delete;

  // Reads output until `pred(stdout)` holds; fails at the deadline.
  template <class Pred>
  void read_until(Pred pred, std::chrono::milliseconds within = 15s) {
    auto deadline = Clock::now() + within;
    while (!pred(out)) {
      INFO("stderr so far: " << err);
      REQUIRE(Clock::now() < deadline);
      REQUIRE(pump(deadline));
    }
  }
  // Reads everything and waits for the exit code (128+signal if killed).
  int wait(std::chrono::milliseconds within = 30s) {
    auto deadline = Clock::now() + within;
    while (pump(deadline)) {
    }
    int status = 0;
    for (;;) {
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      REQUIRE(Clock::now() < deadline);
      ::usleep(1000);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void signal(int sig) { ::kill(pid_, sig); }

  std::string out, err;

 private:
  bool pump(Clock::time_point deadline) {
    pollfd fds[2];
    int n = 0;
    if (out_) fds[n++] = {out_.get(), POLLIN, 0};
    if (err_) fds[n++] = {err_.get(), POLLIN, 0};
    if (n == 0) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    REQUIRE(left.count() > 0);
    ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(left.count()));
    char buf[1 << 16];
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      UniqueFd& fd = fds[i].fd == out_.get() ? out_ : err_;
      std::string& dst = fds[i].fd == out_.get() ? out : err;
      ssize_t got = ::read(fd.get(), buf, sizeof buf);
      if (got > 0) {
        dst.append(buf, static_cast<std::size_t>(got));
      } else {
        fd.reset();
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  UniqueFd out_, err_;
};

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// True while `pid` is a live process (not a zombie).
bool alive(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::vector<std::string> with_config(std::vector<std::string> args) {
  args.insert(args.begin(), {"--ssh-config", cluster().ssh_config()});
  return args;
}

}  // namespace

TEST_CASE("remote: a mixed job places ranks and sets their environment per host") {
  Hvdrun h(with_config({"-H", "localhost:2,node1:2,node2:2", "sh", "-c",
                        "echo \"R=$HVDRUN_RANK H=$HVDRUN_HOSTNAME L=$HVDRUN_LOCAL_RANK "
                        "C=$HVDRUN_CROSS_RANK S=$HVDRUN_SIZE\"; echo err$HVDRUN_RANK >&2"}));
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

TEST_CASE("remote: a remote rank's exit code is hvdrun's, with its host and last stderr") {
  Hvdrun h(with_config({"-H", "localhost:1,node1:1", "sh", "-c",
                        "if [ $HVDRUN_RANK = 1 ]; then echo remote-boom >&2; exit 5; fi; "
                        "exec sleep 30"}));
  CHECK(h.wait() == 5);
  CHECK_THAT(h.err, Catch::Contains("rank 1 on host node1 exited with code 5"));
  CHECK_THAT(h.err, Catch::Contains("    remote-boom\n"));
}

TEST_CASE("remote: SIGINT ends the job with 130 and no rank left alive on any host") {
  char tmpl[] = "/tmp/hvdrun-remote-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  const std::string dir = tmpl;
  Hvdrun h(with_config({"-H", "localhost:1,node1:2,node2:1", "sh", "-c",
                        "echo $$ > " + dir + "/pid.$HVDRUN_RANK; echo up; exec sleep 60"}));
  h.read_until([](const std::string& out) { return count(out, "up\n") == 4; });
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    std::string text = read_file(dir + "/pid." + std::to_string(r));
    REQUIRE(!text.empty());
    pids.push_back(static_cast<pid_t>(std::stol(text)));
    CHECK(alive(pids.back()));
  }
  h.signal(SIGINT);
  CHECK(h.wait() == 130);
  auto deadline = Clock::now() + 5s;
  for (pid_t pid : pids) {
    while (alive(pid) && Clock::now() < deadline) ::usleep(5000);
    CHECK_FALSE(alive(pid));
  }
  for (int r = 0; r < 4; ++r) ::unlink((dir + "/pid." + std::to_string(r)).c_str());
  ::rmdir(dir.c_str());
}

// Starts a job whose ranks write their pid (and their agent's) into a temp dir and wait.
struct PidJob {
  explicit PidJob(const std::string& hosts, int ranks, std::vector<std::string> env = {})
      : dir(make_dir()),
        h(with_config({"-H", hosts, "sh", "-c",
                       "echo $$ > " + dir + "/pid.$HVDRUN_RANK; echo $PPID > " + dir +
                           "/agent.$HVDRUN_RANK; echo up; exec sleep 60"}),
          {}, std::move(env)) {
    h.read_until([ranks](const std::string& out) { return count(out, "up\n") == ranks; });
    for (int r = 0; r < ranks; ++r) pids.push_back(read_pid("pid." + std::to_string(r)));
  }
  ~PidJob() {
    for (const char* prefix : {"pid.", "agent."}) {
      for (std::size_t r = 0; r < pids.size(); ++r)
        ::unlink((dir + "/" + prefix + std::to_string(r)).c_str());
    }
    ::rmdir(dir.c_str());
  }
  static std::string make_dir() {
    char tmpl[] = "/tmp/hvdrun-remote-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    return tmpl;
  }
  pid_t read_pid(const std::string& name) const {
    std::string text = read_file(dir + "/" + name);
    REQUIRE(!text.empty());
    return static_cast<pid_t>(std::stol(text));
  }
  // True once no rank is alive, waiting up to `within`.
  bool none_alive(std::chrono::milliseconds within) const {
    auto deadline = Clock::now() + within;
    for (pid_t pid : pids) {
      while (alive(pid) && Clock::now() < deadline) ::usleep(5000);
      if (alive(pid)) return false;
    }
    return true;
  }
  std::string dir;
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
  CHECK(job.none_alive(5s));
}

TEST_CASE("remote: a host whose connection dies fails the job, naming the host") {
  PidJob job("localhost:1,node1:1,node2:1", 3);
  auto t0 = Clock::now();
  REQUIRE(cluster().kill_sessions(2) > 0);
  CHECK(job.h.wait(10s) == 255);
  CHECK(Clock::now() - t0 < 10s);
  CHECK_THAT(job.h.err, Catch::Contains("host node2"));
  CHECK(job.none_alive(5s));
}

TEST_CASE("remote: a stopped agent is caught by the heartbeat timeout") {
  PidJob job("localhost:1,node1:1", 2, {"HVDRUN_HEARTBEAT_TIMEOUT=1"});
  pid_t agent = job.read_pid("agent.1");
  REQUIRE(::kill(agent, SIGSTOP) == 0);
  int code = job.h.wait(10s);
  ::kill(agent, SIGCONT);  // it then finds its connection gone and ends its rank
  CHECK(code == 255);
  CHECK_THAT(job.h.err, Catch::Contains("host node1") && Catch::Contains("nothing heard from it"));
  CHECK(job.none_alive(5s));
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
           dir);
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
  DIR* d = ::opendir("/proc");
  REQUIRE(d);
  int scanned = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmdline = read_file("/proc/" + std::string(e->d_name) + "/cmdline");
    ++scanned;
    CHECK(cmdline.find(secret) == std::string::npos);
  }
  ::closedir(d);
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

// Waits up to `within` for `pid` to be gone; true when it is.
bool gone_within(pid_t pid, std::chrono::milliseconds within) {
  auto deadline = Clock::now() + within;
  while (alive(pid) && Clock::now() < deadline) ::usleep(5000);
  return !alive(pid);
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
           cwd);
  int code = h.wait();
  INFO("stderr: " << h.err);
  CHECK(code == 255);
  CHECK(Clock::now() - t0 < 15s);  // the local rank was stopped, not waited for
  CHECK_THAT(h.err, Catch::Contains("host node1") &&
                        Catch::Contains("cannot change to directory '" + cwd + "'") &&
                        Catch::Contains("No such file or directory"));
  CHECK(count(h.out, "started") <= 1);  // node1's rank never ran
}

TEST_CASE("remote: an agent that does not report its ranks fails the launch at --start-timeout") {
  // node1's "hvdrun" answers the preflight, but as the agent it reads its input and never
  // says a word: a host where the agent hangs before it starts.
  const std::string dir = PidJob::make_dir();
  const std::string wrapper = cluster().write_file(
      "silent_agent.sh",
      "#!/bin/sh\nif [ \"$1\" = agent ]; then echo $$ > " + dir +
          "/silent.pid; exec cat > /dev/null; fi\nexec '" + kHvdrun + "' \"$@\"\n",
      0755);
  auto t0 = Clock::now();
  Hvdrun h(
      with_config({"--remote-hvdrun", wrapper, "--start-timeout", "3", "-H", "localhost:1,node1:1",
                   "sh", "-c", "echo $$ > " + dir + "/rank.pid; exec sleep 60"}));
  int code = h.wait(20s);
  auto elapsed = Clock::now() - t0;
  INFO("stderr: " << h.err);
  CHECK(code == 255);
  CHECK(elapsed >= 3s);
  CHECK(elapsed < 3s + 5s);  // one deadline from the start, preflight included; then teardown
  CHECK_THAT(h.err, Catch::Contains("--start-timeout 3 s") &&
                        Catch::Contains("host node1: its agent did not answer"));
  CHECK_THAT(h.err, !Catch::Contains("host localhost"));  // its rank had started
  // Nothing left: the local rank and the silent stand-in on node1.
  for (const char* name : {"rank.pid", "silent.pid"}) {
    std::string text = read_file(dir + "/" + name);
    INFO(name);
    REQUIRE(!text.empty());
    CHECK(gone_within(static_cast<pid_t>(std::stol(text)), 5s));
    ::unlink((dir + "/" + name).c_str());
  }
  ::rmdir(dir.c_str());
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

// Not part of the suite (hidden tag): wall time of `true` on 8 loopback hosts x 2 slots.
TEST_CASE("remote: launch time of true on 8 hosts x 2 slots", "[.][bench]") {
  testing::SshdCluster c(8);
  std::string hosts;
  for (int k = 1; k <= 8; ++k) hosts += (k > 1 ? "," : "") + c.alias(k) + ":2";
  for (int round = 0; round < 4; ++round) {
    auto t0 = Clock::now();
    Hvdrun h({"--ssh-config", c.ssh_config(), "-H", hosts, "true"});
    REQUIRE(h.wait() == 0);
    double ms = std::chrono::duration<double>(Clock::now() - t0).count() * 1000;
    WARN("round " << round << ": " << ms << " ms");
  }
}
