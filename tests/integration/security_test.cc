// Issue #14 replayed against the real hvdrun binary: another user (nobody, for real)
// connecting to every TCP port a single-host job listens on, 5,000 connections that
// never authenticate with the launcher at `ulimit -n 1024`, and the launcher out of
// descriptors with connections waiting at its Horovod rendezvous. Each case asserts that
// the job starts and finishes, and measures what docs/reliability.md ("Security") lists.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/fd_limit.h"
#include "tests/support/processes.h"

using namespace hvdrun;
using namespace hvdrun::testing;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = HVDRUN_BINARY_DIR "/tests/runtime/runtime_worker";

// `args` for hvdrun run under `ulimit -n limit` (soft and hard: no raising it back).
std::vector<std::string> limited(int limit, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      "sh", "-c", "ulimit -n " + std::to_string(limit) + " && exec \"$0\" \"$@\"", hvdrun_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Ranks that print both rendezvous ports, then wait for DIR/go before exec'ing `command`.
std::vector<std::string> gated(const std::string& dir, int np, const std::string& command) {
  return {"-np", std::to_string(np), "sh", "-c",
          "echo port=$HVDRUN_RENDEZVOUS_PORT hport=$HOROVOD_GLOO_RENDEZVOUS_PORT; while [ ! -e '" +
              dir + "/go' ]; do sleep 0.01; done; exec " + command};
}

int value_after(const std::string& out, const std::string& key) {
  auto at = out.find(key);
  REQUIRE(at != std::string::npos);
  return std::stoi(out.substr(at + key.size()));
}

void touch(const std::string& path) { std::ofstream(path) << "go\n"; }

// A child running as nobody that opens `n` connections to 127.0.0.1:port, from source
// addresses 127.0.0.1 to 127.0.0.8 in turn, says how many it opened and holds them until
// it is destroyed. The connections send nothing.
class NobodyFlood {
 public:
  NobodyFlood(int port, int n) {
    const passwd* pw = ::getpwnam("nobody");
    REQUIRE(pw != nullptr);
    raise_fd_limit();  // inherited: the child needs n descriptors
    auto [done_r, done_w] = make_pipe();
    auto [hold_r, hold_w] = make_pipe();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      hold_w.reset();  // or its reads never see the parent's EOF
      done_r.reset();
      run(pw->pw_uid, port, n, done_w.get(), hold_r.get());
    }
    hold_ = std::move(hold_w);
    char buf[16] = {};
    REQUIRE(::read(done_r.get(), buf, sizeof buf - 1) > 0);  // the child's count
    opened_ = static_cast<int>(std::strtol(buf, nullptr, 10));
  }
  ~NobodyFlood() { stop(); }
  NobodyFlood(const NobodyFlood&) = delete;
  NobodyFlood& operator=(const NobodyFlood&) = delete;

  /// Connections opened.
  int opened() const { return opened_; }
  /// Closes them all and reaps the child.
  void stop() {
    if (pid_ < 0) return;
    hold_.reset();
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

 private:
  [[noreturn]] static void run(uid_t uid, int port, int n, int done, int hold) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    int opened = 0;
    for (int i = 0; i < n; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in src{};
      src.sin_family = AF_INET;
      src.sin_addr.s_addr = htonl(0x7f000001u + static_cast<unsigned>(i % 8));
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(static_cast<std::uint16_t>(port));
      dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0 &&
          ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0)
        ++opened;
    }
    char buf[16];
    const int len = std::snprintf(buf, sizeof buf, "%d\n", opened);
    (void)!::write(done, buf, static_cast<std::size_t>(len));
    while (::read(hold, buf, 1) > 0) {
    }
    ::_exit(0);
  }

  pid_t pid_ = -1;
  UniqueFd hold_;
  int opened_ = 0;
};

// utime + stime of a process, in seconds.
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  REQUIRE(close != std::string::npos);
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Reads `h`'s output for about `d` (never letting its pipes fill, which would stall it).
void drain_for(CapturedProcess& h, std::chrono::milliseconds d) {
  const auto end = Clock::now() + d;
  h.read_until([&](const std::string&) { return Clock::now() >= end; }, d + 1s);
}

int lines_with(const std::string& text, const std::string& what) {
  int n = 0;
  for (const auto& l : lines(text)) n += l.find(what) != std::string::npos ? 1 : 0;
  return n;
}

// A TCP listener: its port, whether it is IPv6, and the socket's inode.
struct Listener {
  int port = 0;
  bool v6 = false;
  unsigned long inode = 0;
};

std::vector<Listener> tcp_listeners() {
  std::vector<Listener> out;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(path);
    std::string line;
    std::getline(f, line);
    while (std::getline(f, line)) {
      std::istringstream row(line);
      std::string sl, local, remote, st, q, t, retr, uid, timeout;
      unsigned long inode = 0;
      if (!(row >> sl >> local >> remote >> st >> q >> t >> retr >> uid >> timeout >> inode))
        continue;
      if (st != "0A") continue;
      Listener l;
      l.port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      l.v6 = std::string(path).back() == '6';
      l.inode = inode;
      out.push_back(l);
    }
  }
  return out;
}

// Socket inodes held by `pid`.
std::set<unsigned long> socket_inodes(pid_t pid) {
  std::set<unsigned long> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char target[64] = {};
    const std::string link = dir + "/" + e->d_name;
    auto n = ::readlink(link.c_str(), target, sizeof target - 1);
    if (n > 9 && std::string(target, 8) == "socket:[")
      out.insert(std::stoul(std::string(target + 8, static_cast<std::size_t>(n) - 9)));
  }
  ::closedir(d);
  return out;
}

// The path ("@name") of a listening Unix socket whose name starts with `prefix` and that
// a process of the job with `marker` holds; empty while there is none.
std::string job_unix_listener(const std::string& marker, const std::string& prefix) {
  std::set<unsigned long> held;
  for (pid_t p : processes_with(marker)) {
    auto inodes = socket_inodes(p);
    held.insert(inodes.begin(), inodes.end());
  }
  std::ifstream f("/proc/net/unix");
  std::string line;
  std::getline(f, line);  // the header
  while (std::getline(f, line)) {
    std::istringstream row(line);
    std::string num, refs, proto, flags, type, state, path;
    unsigned long inode = 0;
    if (!(row >> num >> refs >> proto >> flags >> type >> state >> inode >> path)) continue;
    // Flags 00010000: accepting connections (listening).
    if (flags == "00010000" && path.rfind(prefix, 0) == 0 && held.count(inode) != 0) return path;
  }
  return "";
}

// The name of the job's segment socket (local rank 0's, "@hvdrun-..."), once it is bound;
// empty when it did not appear within 20 s.
std::string wait_segment_socket(const std::string& marker) {
  std::string name;
  const auto deadline = Clock::now() + 20s * kSlowdown;
  while (name.empty() && Clock::now() < deadline) {
    name = job_unix_listener(marker, "@hvdrun-");
    if (name.empty()) std::this_thread::sleep_for(2ms);  // a scan costs more than this
  }
  return name;
}

// A child running as nobody that connects to the ports it is sent (3 bytes: v6 flag, port
// high, port low), writes `greeting` and a line end, holds the connection, and answers 1 byte
// (1: connected).
class NobodyConnector {
 public:
  explicit NobodyConnector(std::string greeting) : greeting_(std::move(greeting) + "\r\n") {
    const passwd* pw = ::getpwnam("nobody");
    REQUIRE(pw != nullptr);
    auto [req_r, req_w] = make_pipe();
    auto [ans_r, ans_w] = make_pipe();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      req_w.reset();  // or its reads never see the parent's EOF
      ans_r.reset();
      run(pw->pw_uid, req_r.get(), ans_w.get(), greeting_);
    }
    req_ = std::move(req_w);
    ans_ = std::move(ans_r);
  }
  ~NobodyConnector() {
    req_.reset();
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  NobodyConnector(const NobodyConnector&) = delete;
  NobodyConnector& operator=(const NobodyConnector&) = delete;

  bool connect(const Listener& l) {
    const unsigned char m[3] = {static_cast<unsigned char>(l.v6 ? 1 : 0),
                                static_cast<unsigned char>(l.port >> 8),
                                static_cast<unsigned char>(l.port & 0xff)};
    unsigned char ok = 0;
    return write_all(req_.get(), m, 3) && ::read(ans_.get(), &ok, 1) == 1 && ok == 1;
  }

 private:
  [[noreturn]] static void run(uid_t uid, int req, int ans, const std::string& greeting) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    unsigned char m[3];
    while (::read(req, m, 3) == 3) {
      const int port = (m[1] << 8) | m[2];
      int fd = ::socket(m[0] ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
      int rc = -1;
      if (m[0]) {
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(static_cast<std::uint16_t>(port));
        a.sin6_addr = in6addr_loopback;
        rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      } else {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
      }
      if (rc == 0) (void)!::send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL);  // kept open
      const unsigned char ok = rc == 0 ? 1 : 0;
      if (::write(ans, &ok, 1) != 1) break;
    }
    ::_exit(0);
  }

  std::string greeting_;
  pid_t pid_ = -1;
  UniqueFd req_, ans_;
};

struct AttackResult {
  int code = -1;
  int rank_listeners = 0;      // listening sockets of the job's processes other than hvdrun
  int launcher_listeners = 0;  // hvdrun's own (rendezvous, Horovod rendezvous)
  int connected = 0;           // of those, connected to by nobody
  int vanished = 0;            // of those, closed before nobody's connect (the job ended)
  std::string err;
};

// Runs `command` at -np 4 while every TCP listener of the job's processes is connected to
// by nobody as soon as it appears; nobody greets each with the job's marker (the value of
// HVDRUN_TEST_MARKER in the ranks' environment), so that a rank can tell this test's
// connection from another process's.
AttackResult attacked_job(const std::vector<std::string>& command) {
  const std::string marker = unique_marker();
  NobodyConnector nobody(marker.substr(marker.find('=') + 1));
  std::vector<std::string> args = {"-np", "4"};
  args.insert(args.end(), command.begin(), command.end());
  Hvdrun h(args, {marker, "HVDRUN_NCCL=off"});
  const pid_t launcher = h.pid();
  AttackResult r;
  std::atomic<bool> done{false};
  std::thread scanner([&] {
    std::set<unsigned long> seen;
    while (!done) {
      std::map<unsigned long, pid_t> owner;
      for (pid_t p : processes_with(marker))
        for (auto inode : socket_inodes(p)) owner[inode] = p;
      for (auto inode : socket_inodes(launcher)) owner[inode] = launcher;
      for (const Listener& l : tcp_listeners()) {
        auto it = owner.find(l.inode);
        if (it == owner.end() || !seen.insert(l.inode).second) continue;
        (it->second == launcher ? r.launcher_listeners : r.rank_listeners)++;
        if (nobody.connect(l)) {
          ++r.connected;
        } else {
          // A listener that is gone by now was not refused: the job ended first.
          bool still = false;
          for (const Listener& again : tcp_listeners()) still = still || again.inode == l.inode;
          r.vanished += still ? 0 : 1;
        }
      }
      std::this_thread::sleep_for(2ms);  // a scan costs far more than this pause
    }
  });
  r.code = h.wait(120s);
  done = true;
  scanner.join();
  r.err = h.err;
  CHECK(wait_none_with(marker, 5s));
  return r;
}

}  // namespace

TEST_CASE("security: another user connecting to every port of single-host jobs breaks none",
          "[fault][security]") {
  if (::geteuid() != 0) {
    WARN("needs root to act as nobody");
    return;
  }
  // With the default host path the ranks of one host hold no TCP listener at all.
  int ok = 0, launcher_ports = 0, rank_ports = 0, connected = 0;
  for (int job = 0; job < 6; ++job) {
    auto r = attacked_job({kWorker, "collectives"});  // HVDRUN_HOST_PATH=auto
    INFO("job " << job << " stderr: " << r.err);
    CHECK(r.code == 0);
    ok += r.code == 0 ? 1 : 0;
    rank_ports += r.rank_listeners;
    launcher_ports += r.launcher_listeners;
    CHECK(r.rank_listeners == 0);
    // The scan works: it found and reached hvdrun's own two servers in every job, which
    // refused nobody (403, no secret) without disturbing the job.
    CHECK(r.launcher_listeners >= 2);
    CHECK(r.connected + r.vanished == r.launcher_listeners + r.rank_listeners);
    connected += r.connected;
  }
  CHECK(connected > 0);
  CHECK(ok == 6);
  // The same scan finds and reaches ranks that do listen (each holds one until this test's
  // connection comes, 60 s at most; connections of other processes on the machine, which
  // do not greet it with the job's marker, are closed and waited past), so it could have
  // found the ranks' listeners above.
  auto control =
      attacked_job({"python3", "-c",
                    "import os, socket\n"
                    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); s.settimeout(60)\n"
                    "want = os.environ['HVDRUN_TEST_MARKER'].encode()\n"
                    "while True:\n"
                    "    c, _ = s.accept(); c.settimeout(2)\n"
                    "    try:\n"
                    "        got = c.recv(256)\n"
                    "    except OSError:\n"
                    "        got = b''\n"
                    "    c.close()\n"
                    "    if want in got:\n"
                    "        break\n"});
  CHECK(control.code == 0);
  CHECK(control.rank_listeners == 4);
  CHECK(control.connected + control.vanished == control.launcher_listeners + 4);
  CHECK(control.connected >= 4);
  std::printf(
      "security-gloo-ports: %d of 6 jobs succeeded with nobody connecting to every "
      "listener (%d of hvdrun's, %d of the ranks'); control: %d rank listeners reached\n",
      ok, launcher_ports, rank_ports, control.rank_listeners);
  report_fault({"another user connects to every TCP listener of 6 single-host -np 4 jobs",
                std::to_string(ok) + " of 6 succeed; the ranks hold no listener (shared memory)", 0,
                0, "nothing"});
}

TEST_CASE("security: 5,000 unauthenticated connections with the launcher at ulimit -n 1024",
          "[fault][security]") {
  if (::geteuid() != 0) {
    WARN("needs root to act as nobody");
    return;
  }
  const std::string marker = unique_marker();
  TempDir tmp("security");
  const int np = 4;
  CapturedProcess h(limited(1024, gated(tmp.path(), np, kWorker + " collectives")), {marker});
  h.read_until(
      [](const std::string& out) { return count(out, "hport=") == np && out.back() == '\n'; });
  const int port = value_after(h.out, "port=");
  const auto t0 = Clock::now();
  NobodyFlood flood(port, 5000);  // another user, holding them open
  const double flood_ms = ms_since(t0);
  CHECK(flood.opened() == 5000);
  const long rss = rss_kib(h.pid());
  touch(tmp.path() + "/go");  // the ranks rendezvous while the flood is held open
  const int code = h.wait(120s);
  const double job_ms = ms_since(t0);
  INFO("stderr: " << h.err);
  CHECK(code == 0);
  // The launcher's log: a few rate-limited lines, not one per connection, and nothing but
  // what the connections caused.
  CHECK(lines_with(h.err, "unauthenticated") <= 4);
  CHECK(lines_with(h.err, "have not authenticated") >= 1);  // it saw the flood, and said so
  CHECK(without_outside_connections(h.err).empty());
  CHECK(job_ms < 30000 * kSlowdown);
  CHECK(wait_none_with(marker, 5s));
  char outcome[240];
  std::snprintf(outcome, sizeof outcome,
                "job correct in %.0f ms (flood %.0f ms); launcher RSS %ld KiB, %zu log lines",
                job_ms, flood_ms, rss, lines(h.err).size());
  report_fault({"5,000 unauthenticated connections, launcher at ulimit -n 1024", outcome, job_ms,
                static_cast<int>(processes_with(marker).size()), "nothing"});
}

TEST_CASE("security: out of descriptors, the launcher's accept loops back off",
          "[fault][security]") {
#ifdef HVDRUN_SANITIZED_BUILD
  WARN("skipped in sanitizer builds: their runtime fails first when descriptors run out");
  return;
#endif
  if (::geteuid() != 0) {
    WARN("needs root to act as nobody");
    return;
  }
  const std::string marker = unique_marker();
  TempDir tmp("security");
  const int np = 2;
  CapturedProcess h(limited(100, gated(tmp.path(), np, kWorker + " collectives")), {marker});
  h.read_until(
      [](const std::string& out) { return count(out, "hport=") == np && out.back() == '\n'; });
  const int hport = value_after(h.out, "hport=");
  // More than the launcher has descriptors for: its cap lets one user of this host hold
  // 128 connections without a request, and it has fewer than that left.
  NobodyFlood flood(hport, 800);
  CHECK(flood.opened() == 800);
  // Descriptors are short now: measure the launcher's CPU time over 2 s.
  const double cpu0 = cpu_seconds(h.pid());
  const auto t0 = Clock::now();
  drain_for(h, 2s);  // the interval measured, its output read as it comes
  const double cpu = (cpu_seconds(h.pid()) - cpu0) / (ms_since(t0) / 1000.0);
  flood.stop();
  touch(tmp.path() + "/go");
  const int code = h.wait(120s);
  const int accept_lines = lines_with(h.err, "accept failed");
  INFO("stderr: " << h.err);
  CHECK(code == 0);
  CHECK(accept_lines >= 1);  // it did run out, and said so
  CHECK(accept_lines <= 2);  // once per cause per 10 s, not once per try
  CHECK(cpu < 0.2);          // no busy loop (it spun at 64% of a core)
  CHECK(wait_none_with(marker, 5s));
  char outcome[200];
  std::snprintf(outcome, sizeof outcome,
                "launcher at %.1f%% of a core while out of descriptors, %d accept log line(s); "
                "job correct afterwards",
                cpu * 100, accept_lines);
  report_fault({"800 connections to the Horovod rendezvous, launcher at ulimit -n 100", outcome, 0,
                static_cast<int>(processes_with(marker).size()), "nothing"});
}

TEST_CASE(
    "security: another user connecting to the segment socket of a host checking in "
    "through its leader is refused, and the job runs",
    "[fault][security][checkin]") {
  if (::geteuid() != 0) {
    WARN("needs root to act as nobody");
    return;
  }
  // With HVDRUN_CHECKIN=host the segment socket's name comes from the job secret, but a
  // bound abstract socket is listed in /proc/net/unix for every user: local rank 0 must
  // refuse another uid. Local rank 1 starts 2 s late, so the socket waits that long. The
  // test finds this job's socket (tests beside it have sockets of the same prefix) and
  // hands its name to the attacker, who checks that it can see the name itself.
  const std::string marker = unique_marker();
  Hvdrun h(
      {"-np", "3", "-x", "HVDRUN_CHECKIN=host", "sh", "-c",
       "if [ \"$HVDRUN_LOCAL_RANK\" = 1 ]; then sleep 2; fi; exec " + kWorker + " collectives"},
      {marker});
  const std::string name = wait_segment_socket(marker);
  REQUIRE_FALSE(name.empty());
  const std::string attacker =
      "import socket, sys\n"
      "name = sys.argv[1]\n"
      "listed = any(l.split()[7:8] == [name] for l in open('/proc/net/unix'))\n"
      "print('listed' if listed else 'not listed', name, flush=True)\n"
      "s = socket.socket(socket.AF_UNIX)\n"
      "try:\n"
      "    s.connect('\\0' + name[1:]); print('connected', name, flush=True)\n"
      "    s.send(b'\\x01\\0\\0\\0\\x01\\0\\0\\0')\n"
      "    print('reached', name, 'got', len(s.recv(64)), flush=True)\n"
      "except OSError as e:\n"
      "    print('refused', name, e, flush=True)\n";
  CapturedProcess nobody({"runuser", "-u", "nobody", "--", "python3", "-c", attacker, name});
  const int attacker_code = nobody.wait(30s);
  const int code = h.wait(120s);
  INFO("hvdrun stdout: " << h.out << "\nstderr: " << h.err << "\nattacker: " << nobody.out
                         << nobody.err);
  CHECK(code == 0);
  CHECK(attacker_code == 0);
  // It saw the name, connected, and local rank 0 closed it unserved (0 bytes back, or
  // closed before the attacker's hello: a broken pipe).
  CHECK_THAT(nobody.out, Catch::Contains("listed " + name + "\n"));
  CHECK_THAT(nobody.out, Catch::Contains("connected " + name));
  CHECK_THAT(nobody.out, !Catch::Contains(" got 1\n"));  // the segment's one-byte message
  CHECK_THAT(h.out + h.err, Catch::Contains("refused a local connection from uid 65534"));
  CHECK(wait_none_with(marker, 5s));
}

// Issue #27: each refused connection to the segment socket wrote a warning line; a stranger
// connecting in a loop while one local rank was late filled the job's stderr (53,239 lines,
// 8.25 MB in 4 s). Now the first is written and the rest counted.
TEST_CASE("security: 10,000 refused connections to the segment socket write a few lines",
          "[fault][security][checkin]") {
  if (::geteuid() != 0) {
    WARN("needs root to act as nobody");
    return;
  }
  TempDir tmp("segment-flood");
  const std::string marker = unique_marker();
  // Local rank 1 starts once the stranger is done: local rank 0's socket waits until then.
  Hvdrun h({"--start-timeout", "120", "-np", "2", "-x", "HVDRUN_CHECKIN=host", "sh", "-c",
            "if [ \"$HVDRUN_LOCAL_RANK\" = 1 ]; then while [ ! -e '" + tmp.path() +
                "/go' ]; do sleep 0.01; done; fi; exec " + kWorker + " collectives"},
           {marker});
  const std::string name = wait_segment_socket(marker);
  REQUIRE_FALSE(name.empty());
  const std::string attacker =
      "import socket, sys\n"
      "name, n = sys.argv[1], 0\n"
      "for _ in range(10000):\n"
      "    s = socket.socket(socket.AF_UNIX)\n"
      "    try:\n"
      "        s.connect('\\0' + name[1:]); n += 1\n"
      "    except OSError:\n"
      "        pass\n"
      "    s.close()\n"
      "print('connected', n, flush=True)\n";
  const auto t0 = Clock::now();
  CapturedProcess nobody({"runuser", "-u", "nobody", "--", "python3", "-c", attacker, name});
  const int attacker_code = nobody.wait(120s);
  const double flood_ms = ms_since(t0);
  touch(tmp.path() + "/go");
  const int code = h.wait(120s);
  const std::string all = h.out + h.err;
  INFO("attacker: " << nobody.out << nobody.err
                    << "\nhvdrun stderr (first 4 KiB): " << h.err.substr(0, 4096));
  CHECK(attacker_code == 0);
  CHECK(code == 0);
  CHECK_THAT(nobody.out, Catch::Contains("connected 10000"));
  const int lines = lines_with(all, "segment socket");
  CHECK(lines >= 1);
  // The first refusal, one line per 10 s of flood with its count, and the count left at the
  // end: a few lines, not 10,000.
  CHECK(lines <= 2 + static_cast<int>(flood_ms / 10000));
  CHECK_THAT(all, Catch::Contains("more of 'refused uid 65534'") ||
                      Catch::Contains("more like it in the last 10 s"));
  CHECK(wait_none_with(marker, 5s));
  char outcome[160];
  std::snprintf(outcome, sizeof outcome, "job correct; %d warning line(s) for 10,000 refusals",
                lines);
  report_fault({"10,000 connections from nobody to a late host's segment socket", outcome, flood_ms,
                static_cast<int>(processes_with(marker).size()), "nothing"});
}
