// Elastic mode's parts without hosts: the blacklist's cooldowns, the discovery output
// parser, the discovery script run as a real child (failing, hanging, not executable,
// flooding), and the generation loop driven with a stand-in launch.
#include <catch2/catch.hpp>

#include <algorithm>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "launcher/elastic/discovery.h"
#include "launcher/elastic/elastic.h"
#include "tests/support/processes.h"

using namespace hvdrun;
using namespace hvdrun::launcher;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string script(const testing::TempDir& dir, const std::string& body) {
  std::string path = dir.path() + "/discover.sh";
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

std::string names(const std::vector<hostfile::HostSlots>& hosts) {
  std::string s;
  for (const auto& h : hosts) s += h.name + ":" + std::to_string(h.slots) + " ";
  return s;
}

}  // namespace

TEST_CASE("blacklist: a host is excluded for MIN, doubling per repeat up to MAX, then back") {
  Blacklist b(10s, 35s);
  const auto t = Clock::now();
  CHECK(!b.excluded("a", t));
  CHECK(b.add("a", t) == t + 10s);
  CHECK(b.excluded("a", t + 9s));
  CHECK(!b.excluded("a", t + 10s));
  CHECK(!b.excluded("b", t));
  CHECK(b.add("a", t + 20s) == t + 40s);  // second failure: 20 s
  CHECK(b.add("a", t + 50s) == t + 85s);  // third: 40 s, capped at 35
  CHECK(b.active(t + 60s).size() == 1);
  CHECK(b.active(t + 85s).empty());
}

TEST_CASE("discovery output: host and host:slots lines, comments, IPv6, bad lines named") {
  CHECK(names(parse_discovery_output("a\nb:4\n\n  # note\nc:2 # trailing\n", 3, "d")) ==
        "a:3 b:4 c:2 ");
  CHECK(names(parse_discovery_output("[fe80::1]:2\n::1\n[::2]\n", 1, "d")) ==
        "fe80::1:2 ::1:1 ::2:1 ");
  CHECK(parse_discovery_output("", 1, "d").empty());
  CHECK_THROWS_WITH(parse_discovery_output("a\nb:x\n", 1, "d.sh"),
                    Catch::Contains("host discovery script d.sh: line 2 ('b:x')") &&
                        Catch::Contains("expected one 'host' or 'host:slots' per line"));
  CHECK_THROWS_WITH(parse_discovery_output("a\na:2\n", 1, "d.sh"),
                    Catch::Contains("line 2") && Catch::Contains("listed twice (first on line 1)"));
  // Names compare without case, as -H and --hostfile compare them.
  CHECK_THROWS_WITH(parse_discovery_output("n1\nx\nN1:2\n", 1, "d.sh"),
                    Catch::Contains("line 3") && Catch::Contains("first on line 1"));
}

TEST_CASE("discovery output: 160,000 host lines parse in time linear in the lines") {
  // A scan of every earlier host per line made 160,000 lines take 42 s. Compared with a
  // tenth of the lines, parsed just before, rather than with a wall-clock bound, so that
  // the machine's load does not decide: linear is about 10x, the quadratic scan was 100x.
  const auto text_of = [](int lines) {
    std::string text;
    text.reserve(static_cast<std::size_t>(lines) * 16);
    for (int i = 0; i < lines; ++i) text += "node" + std::to_string(i) + ":8\n";
    return text;
  };
  const auto best_of_three = [](const std::string& text, std::size_t want) {
    double best = 1e9;
    for (int k = 0; k < 3; ++k) {
      const auto t0 = Clock::now();
      const auto hosts = parse_discovery_output(text, 1, "d.sh");
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      REQUIRE(hosts.size() == want);
    }
    return best;
  };
  constexpr int kLines = 160000;
  std::string text = text_of(kLines);
  const double tenth = best_of_three(text_of(kLines / 10), kLines / 10);
  const double whole = best_of_three(text, kLines);
  WARN("parsed " << kLines / 10 << " lines in " << tenth << " s, " << kLines << " in " << whole
                 << " s");
  CHECK(whole < 50 * tenth + 0.05);
  CHECK(whole < 20.0 * testing::kSlowdown);  // not minutes, whatever the load
  CHECK(parse_discovery_output(text, 1, "d.sh").back().name == "node159999");
  // The last line repeating the first is still caught.
  text += "NODE0\n";
  CHECK_THROWS_WITH(parse_discovery_output(text, 1, "d.sh"),
                    Catch::Contains("line 160001") && Catch::Contains("first on line 1"));
}

TEST_CASE("discovery script: its hosts, or why there are none") {
  testing::TempDir dir("discovery");
  SECTION("hosts") {
    Discovery d(script(dir, "echo n1:2; echo n2"), 4, 5s);
    auto r = d.run();
    REQUIRE(!r.error);
    CHECK(names(r.hosts) == "n1:2 n2:4 ");
  }
  SECTION("a non-zero exit, with its stderr") {
    Discovery d(script(dir, "echo n1; echo 'no cloud credentials' >&2; exit 3"), 1, 5s);
    auto r = d.run();
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("exited with code 3") &&
                             Catch::Contains("its stderr: no cloud credentials"));
  }
  SECTION("a hang is killed at the timeout") {
    Discovery d(script(dir, "exec sleep 60"), 1, 300ms);
    const auto t0 = Clock::now();
    auto r = d.run();
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("did not finish within 0.3 s"));
    CHECK(Clock::now() - t0 < 5s);
  }
  SECTION("more output than a host list") {
    Discovery d(script(dir, "yes n1"), 1, 20s);
    auto r = d.run();
    REQUIRE(r.error);
    CHECK_THAT(*r.error, Catch::Contains("printed more than 4 MiB"));
  }
  SECTION("not executable") {
    const std::string path = dir.path() + "/plain.txt";
    std::ofstream(path) << "n1\n";
    Discovery d(path, 1, 5s);
    CHECK_THROWS_AS(d.run(), UsageError);
  }
}

namespace {

// A stand-in launch: records each generation's options and start time and answers from a
// script of outcomes, each after running for its step's time.
struct FakeLaunch {
  struct Step {
    int code;
    std::optional<Failure> outcome;
    std::chrono::milliseconds runs{0};
  };
  std::vector<Step> steps;
  std::vector<LaunchOptions> seen;
  std::vector<Clock::time_point> started;
  int operator()(const LaunchOptions& o, const JobHooks& hooks) {
    seen.push_back(o);
    started.push_back(Clock::now());
    REQUIRE(seen.size() <= steps.size());
    const Step& s = steps[seen.size() - 1];
    std::this_thread::sleep_for(s.runs);  // the generation's run time, not a wait on an event
    *hooks.outcome = s.outcome;
    return s.code;
  }
};

Failure rank_failure(int code, const std::string& host) {
  Failure f{code, "hvdrun: rank 0 on host " + host + " exited\n", {host}};
  f.rank_failed = true;
  return f;
}

LaunchOptions three_hosts() {
  LaunchOptions o;
  o.hosts = {{"a", 1}, {"b", 1}, {"c", 1}};
  o.np = 3;
  o.elastic.min_np = 1;
  o.command = {"true"};
  return o;
}

// One host of 2 slots, both needed (--min-np 2): a failing rank's host is kept.
LaunchOptions one_needed_host() {
  LaunchOptions o;
  o.hosts = {{"a", 2}};
  o.np = 2;
  o.elastic.min_np = 2;
  o.command = {"true"};
  return o;
}

}  // namespace

TEST_CASE("generations: restarts counted against one budget, failed hosts left out") {
  auto o = three_hosts();
  o.elastic.reset_limit = 1;
  FakeLaunch fake;
  fake.steps = {{4, rank_failure(4, "a")}, {5, rank_failure(5, "b")}};
  CHECK(run_elastic(o, std::ref(fake)) == 5);
  REQUIRE(fake.seen.size() == 2);
  CHECK(fake.seen[0].generation == 0);
  CHECK(fake.seen[1].generation == 1);
  CHECK(names(fake.seen[1].hosts) == "b:1 c:1 ");
  CHECK(fake.seen[1].np == 2);
}

TEST_CASE("generations: a clean end, an interrupt and a requested stop") {
  auto o = three_hosts();
  FakeLaunch fake;
  Failure grow{0, "hvdrun: grow\n", {}};
  grow.requested = true;
  Failure sigint{130, "hvdrun: interrupted\n", {}};
  sigint.interrupted = true;
  fake.steps = {{0, grow}, {130, sigint}};
  CHECK(run_elastic(o, std::ref(fake)) == 130);
  CHECK(fake.seen.size() == 2);
  FakeLaunch clean;
  clean.steps = {{0, std::nullopt}};
  CHECK(run_elastic(three_hosts(), std::ref(clean)) == 0);
}

TEST_CASE("generations: a lost host always leaves, too few slots end the job") {
  auto o = three_hosts();
  o.elastic.min_np = 2;
  FakeLaunch fake;
  fake.steps = {{255, Failure{255, "lost a\n", {"a"}}}, {255, Failure{255, "lost b\n", {"b"}}}};
  CHECK(run_elastic(o, std::ref(fake)) == 255);
  CHECK(fake.seen.size() == 2);  // after b, only c's slot is left: below --min-np 2
}

TEST_CASE("generations: a failing rank's host stays when leaving it out is below --min-np") {
  auto o = one_needed_host();
  o.elastic.reset_limit = 2;
  FakeLaunch fake;
  fake.steps = {{3, rank_failure(3, "a")}, {3, rank_failure(3, "a")}, {0, std::nullopt}};
  const auto t0 = Clock::now();
  CHECK(run_elastic(o, std::ref(fake)) == 0);
  REQUIRE(fake.seen.size() == 3);
  CHECK(names(fake.seen[2].hosts) == "a:2 ");
  // With a restart budget the restarts come at once (the default cooldown is 10 s).
  CHECK(Clock::now() - t0 < 5s);
}

// Without a budget, a program that fails at once would restart on its kept host for ever
// at full speed (2-3 restarts a second were seen): each restart waits the host's cooldown,
// doubling with each failure in a row, and a generation that ran for the longest cooldown
// starts the count over.
TEST_CASE("generations: with no restart budget a kept host's restarts wait its cooldown") {
  auto o = one_needed_host();
  o.elastic.cooldown_min_s = 1;
  o.elastic.cooldown_max_s = 2;
  FakeLaunch fake;
  fake.steps = {{3, rank_failure(3, "a")},
                {3, rank_failure(3, "a")},
                {3, rank_failure(3, "a"), 2100ms},  // ran for the longest cooldown
                {0, std::nullopt}};
  CHECK(run_elastic(o, std::ref(fake)) == 0);
  REQUIRE(fake.started.size() == 4);
  const auto gap = [&](std::size_t i, std::chrono::milliseconds ran) {
    return fake.started[i] - fake.started[i - 1] - ran;
  };
  CHECK(gap(1, 0ms) >= 1s);  // the first failure: MIN
  CHECK(gap(2, 0ms) >= 2s);  // the second in a row: doubled, up to MAX
  CHECK(gap(3, 2100ms) >= 1s);
  CHECK(gap(3, 2100ms) < gap(2, 0ms) - 500ms);  // back to MIN after the long run
}

// -np sizes the first generation only: the growth check must size what it found as the
// next generation would be (up to --max-np), or a job started at -np 2 --max-np 4 never
// grows, whatever discovery reports.
namespace {

// HVDRUN_DISCOVERY_INTERVAL at 0.1 s for a case, the environment as it was however it ends.
struct FastDiscovery {
  FastDiscovery() { ::setenv("HVDRUN_DISCOVERY_INTERVAL", "0.1", 1); }
  ~FastDiscovery() { ::unsetenv("HVDRUN_DISCOVERY_INTERVAL"); }
  FastDiscovery(const FastDiscovery&) = delete;
  FastDiscovery& operator=(const FastDiscovery&) = delete;
};

// -np 2 --min-np 2 --max-np 4 with `discover` as the discovery script.
LaunchOptions two_to_four(const std::string& discover) {
  auto o = three_hosts();
  o.hosts.clear();
  o.np = 2;
  o.elastic.min_np = 2;
  o.elastic.max_np = 4;
  o.elastic.discovery_script = discover;
  return o;
}

}  // namespace

// As Horovod's driver: -np is not a cap on the first generation, which would otherwise grow
// (a reset, or a restart) at the first discovery after the start.
TEST_CASE("generations: the first one takes every usable slot up to --max-np") {
  testing::TempDir dir("elastic");
  FastDiscovery fast;
  auto o = two_to_four(script(dir, "echo a:2; echo b:1; echo c:2"));
  std::vector<LaunchOptions> seen;
  const GenerationLaunch launch = [&](const LaunchOptions& g, const JobHooks& hooks) {
    seen.push_back(g);
    *hooks.outcome = std::nullopt;
    return 0;
  };
  CHECK(run_elastic(o, launch) == 0);
  REQUIRE(seen.size() == 1);
  CHECK(*seen[0].np == 4);
  CHECK(seen[0].hosts.size() == 3);
  o.elastic.max_np.reset();
  seen.clear();
  CHECK(run_elastic(o, launch) == 0);
  REQUIRE(seen.size() == 1);
  CHECK(*seen[0].np == 5);  // no --max-np: every usable slot
}

TEST_CASE("generations: a restart-mode job asks to grow when discovery lists more slots") {
  testing::TempDir dir("elastic");
  FastDiscovery fast;
  const std::string more = dir.path() + "/more";
  auto o = two_to_four(script(dir, "echo a:2; if [ -e '" + more + "' ]; then echo b:2; fi"));
  std::vector<int> sizes;
  std::vector<std::string> why;
  const GenerationLaunch launch = [&](const LaunchOptions& g, const JobHooks& hooks) {
    sizes.push_back(*g.np);
    if (g.generation == 0) {
      std::ofstream(more) << "b\n";  // the second host appears once the job runs
      // The job loop's turns, until the growth check asks for a stop (or 20 s pass).
      const auto give_up = Clock::now() + 20s;
      while (Clock::now() < give_up) {
        if (auto w = hooks.should_stop()) {
          why.push_back(*w);
          Failure grow{0, "hvdrun: " + *w + "\n", {}};
          grow.requested = true;
          *hooks.outcome = grow;
          return 0;
        }
        std::this_thread::sleep_for(10ms);
      }
    }
    *hooks.outcome = std::nullopt;
    return 0;
  };
  CHECK(run_elastic(o, launch) == 0);
  CHECK(sizes == std::vector<int>{2, 4});
  REQUIRE(why.size() == 1);
  CHECK_THAT(why[0], Catch::Contains("discovery found 4 usable slots for a job of 2 ranks"));
}

// horovodrun's --reset-limit counts a growth as a reset ("scale up or down"); torchrun's
// --max-restarts counts failures only.
TEST_CASE(
    "generations: a growth beyond --reset-limit ends the job, one within --max-restarts not") {
  testing::TempDir dir("elastic");
  FastDiscovery fast;
  const std::string more = dir.path() + "/more";
  for (const char* flag : {"--reset-limit", "--max-restarts"}) {
    INFO(flag);
    std::remove(more.c_str());
    auto o = two_to_four(script(dir, "echo a:2; if [ -e '" + more + "' ]; then echo b:2; fi"));
    o.elastic.reset_limit = 0;
    o.elastic.reset_limit_flag = flag;
    std::vector<int> sizes;
    std::string why;
    const GenerationLaunch launch = [&](const LaunchOptions& g, const JobHooks& hooks) {
      sizes.push_back(*g.np);
      if (g.generation == 0) {
        std::ofstream(more) << "b\n";
        const auto give_up = Clock::now() + 20s;
        while (Clock::now() < give_up) {
          if (auto w = hooks.should_stop()) {
            why = *w;
            Failure stop{0, "hvdrun: " + *w + "\n", {}};
            stop.requested = true;
            *hooks.outcome = stop;
            return 0;
          }
          std::this_thread::sleep_for(10ms);
        }
      }
      *hooks.outcome = std::nullopt;
      return 0;
    };
    const int code = run_elastic(o, launch);
    if (std::string(flag) == "--reset-limit") {
      CHECK(code == 255);
      CHECK(sizes == std::vector<int>{2});
      CHECK_THAT(why, Catch::Contains("the reset limit (--reset-limit 0, which counts every "
                                      "reset, a change of hosts too"));
    } else {
      CHECK(code == 0);
      CHECK(sizes == std::vector<int>{2, 4});
    }
  }
}

// Elastic join (--nnodes MIN:MAX): the nodes are the hosts. A recovery in process counts
// nodes, not ranks, and excludes no node; a generation that ends ends the job, since the
// other nodes' hvdrun end with it.
TEST_CASE("generations: an elastic join recovers in process only and counts its nodes") {
  auto o = three_hosts();
  o.join.nnodes = 3;
  o.join.min_nodes = 2;
  o.elastic.min_np = 2;
  o.elastic.restarts = false;
  int launches = 0;
  const GenerationLaunch launch = [&](const LaunchOptions&, const JobHooks& hooks) {
    ++launches;
    const auto how = hooks.reform(rank_failure(3, "b"));
    REQUIRE(how);
    CHECK(how->min_hosts == 2);
    CHECK(how->min_np == 1);
    CHECK(how->excluded.empty());
    hooks.reformed(1, 3, 2, 1, "rank 0 on host b exited");
    *hooks.outcome = Failure{255, "hvdrun: lost c\n", {"c"}};
    return 255;
  };
  CHECK(run_elastic(o, launch) == 255);
  CHECK(launches == 1);
}
