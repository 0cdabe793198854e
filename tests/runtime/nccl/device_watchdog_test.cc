// DeviceWatchdog without a GPU: markers are flags the test sets, the failure hook
// records its message instead of ending the process.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/nccl/device_watchdog.h"

using hvdrun::runtime::DeviceWatchdog;
using namespace std::chrono_literals;

namespace {

// Operations the test completes by hand, and what the watchdog did with them.
struct FakeDevice {
  std::atomic<bool> ops[8] = {};
  std::atomic<bool> broken{false};
  std::mutex mu;
  std::multiset<void*> released;
  std::promise<std::string> failure;
  std::atomic<int> failures{0};

  DeviceWatchdog::Hooks hooks() {
    DeviceWatchdog::Hooks h;
    h.done = [](void* m) { return static_cast<std::atomic<bool>*>(m)->load(); };
    h.release = [this](void* m) {
      std::lock_guard lock(mu);
      released.insert(m);
    };
    h.async_error = [this]() -> std::string {
      return broken ? "remote process exited or there was a network error" : "";
    };
    h.on_failure = [this](const std::string& why) {
      if (failures++ == 0) failure.set_value(why);
    };
    return h;
  }
  std::size_t released_count() {
    std::lock_guard lock(mu);
    return released.size();
  }
};

// Polls `pred` until it holds or `within` passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds within = 5s) {
  auto end = std::chrono::steady_clock::now() + within;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

}  // namespace

TEST_CASE("device watchdog: completed operations are released, nothing fails",
          "[runtime][watchdog]") {
  FakeDevice dev;
  DeviceWatchdog w(dev.hooks(), 10s, "rank 0 of 2", 5ms);
  for (auto& op : dev.ops) w.track(&op, "allreduce", 4);
  CHECK(w.pending() == 8);
  for (auto& op : dev.ops) op = true;
  CHECK(eventually([&] { return w.pending() == 0; }));
  CHECK(dev.released_count() == 8);
  CHECK_FALSE(w.failed());
  CHECK(dev.failures == 0);
}

TEST_CASE("device watchdog: an operation stuck past the timeout is reported once, naming it",
          "[runtime][watchdog]") {
  FakeDevice dev;
  auto failure = dev.failure.get_future();
  DeviceWatchdog w(dev.hooks(), 200ms, "rank 1 of 4", 5ms);
  dev.ops[0] = true;
  w.track(&dev.ops[0], "allreduce", 1);
  w.track(&dev.ops[1], "broadcast", 1024, 3);
  w.track(&dev.ops[2], "allgather", 8);
  dev.ops[2] = true;  // finished, but behind the stuck one
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(failure.wait_for(5s) == std::future_status::ready);
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 150ms);
  std::string why = failure.get();
  CHECK_THAT(why,
             Catch::Contains("rank 1 of 4") &&
                 Catch::Contains("device broadcast of 1024 elements from rank 3 (operation 2)") &&
                 Catch::Contains("did not complete within 0.2 s (HVDRUN_OP_TIMEOUT)"));
  CHECK(w.failed());
  std::this_thread::sleep_for(50ms);
  CHECK(dev.failures == 1);
}

TEST_CASE("device watchdog: an asynchronous NCCL error is reported even with nothing pending",
          "[runtime][watchdog]") {
  FakeDevice dev;
  auto failure = dev.failure.get_future();
  DeviceWatchdog w(dev.hooks(), 10s, "rank 2 of 3", 5ms);
  dev.broken = true;
  REQUIRE(failure.wait_for(5s) == std::future_status::ready);
  CHECK_THAT(failure.get(), Catch::Contains("rank 2 of 3: NCCL failed: remote process exited"));
}

TEST_CASE("device watchdog: markers still pending at shutdown are given back",
          "[runtime][watchdog]") {
  FakeDevice dev;
  {
    DeviceWatchdog w(dev.hooks(), 10s, "rank 0 of 1", 5ms);
    w.track(&dev.ops[0], "allreduce", 1);
    w.track(&dev.ops[1], "allreduce", 1);
  }
  CHECK(dev.released_count() == 2);
  CHECK(dev.failures == 0);
}
