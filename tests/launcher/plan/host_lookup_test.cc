// Lookups of exec: host names (launcher/plan/host_lookup.h) with a scripted resolver: they run
// side by side but never more than the bound, addresses need no resolver, nothing is waited
// for past the deadline, and the real resolver answers for an address and a missing name.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "launcher/plan/host_lookup.h"

using hvdrun::launcher::HostLookups;
using hvdrun::launcher::resolve_ipv4;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// A resolver that holds every call until released, counting how many run at once.
struct HeldResolver {
  std::mutex mutex;
  std::condition_variable changed;
  int running = 0;
  int most = 0;
  int calls = 0;
  bool released = false;

  std::string operator()(const std::string& name) {
    std::unique_lock lock(mutex);
    ++calls;
    most = std::max(most, ++running);
    changed.notify_all();
    changed.wait(lock, [&] { return released; });
    --running;
    return name.rfind("sim", 0) == 0 ? "10.0.0." + name.substr(3) : std::string();
  }
  // Waits (bounded) until `n` calls are running at once.
  bool wait_running(int n) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return running >= n; });
  }
  void release() {
    const std::lock_guard lock(mutex);
    released = true;
    changed.notify_all();
  }
};

}  // namespace

TEST_CASE("host lookups run side by side, at most the bound at once, each name once") {
  auto resolver = std::make_shared<HeldResolver>();
  std::vector<std::string> names;
  for (int i = 1; i <= 64; ++i) names.emplace_back("sim" + std::to_string(i));
  names.emplace_back("sim1");  // twice: looked up once
  HostLookups lookups(names, 8, Clock::now() + 30s,
                      [resolver](const std::string& n) { return (*resolver)(n); });
  REQUIRE(resolver->wait_running(8));
  resolver->release();
  CHECK(lookups.address("sim64") == "10.0.0.64");
  CHECK(lookups.address("sim1") == "10.0.0.1");
  for (const auto& n : names) CHECK_FALSE(lookups.address(n).empty());
  CHECK(resolver->most == 8);
  CHECK(resolver->calls == 64);
  CHECK(lookups.resolver_calls() == 64);
  CHECK(lookups.address("not-asked-for").empty());
  CHECK(lookups.unanswered().empty());
}

TEST_CASE("host lookups: an address needs no resolver, and the deadline bounds the wait") {
  auto resolver = std::make_shared<HeldResolver>();
  {
    HostLookups lookups({"127.0.0.5", "10.1.2.3", "stuck"}, 4, Clock::now() + 300ms,
                        [resolver](const std::string& n) { return (*resolver)(n); });
    CHECK(lookups.address("127.0.0.5") == "127.0.0.5");
    CHECK(lookups.address("10.1.2.3") == "10.1.2.3");
    REQUIRE(resolver->wait_running(1));
    const auto t0 = Clock::now();
    CHECK(lookups.address("stuck").empty());  // not answered by the deadline
    CHECK(Clock::now() - t0 < 5s);
    CHECK(lookups.resolver_calls() == 1);
    CHECK(lookups.unanswered() == std::vector<std::string>{"stuck"});
  }
  // The abandoned lookup finishes on its own thread; its answer goes nowhere.
  resolver->release();
}

TEST_CASE("the real resolver: an address, localhost, and a name that does not exist") {
  CHECK(resolve_ipv4("127.0.0.1") == "127.0.0.1");
  CHECK(resolve_ipv4("localhost") == "127.0.0.1");
  CHECK(resolve_ipv4("no-such-host.invalid").empty());
}
