// The collective engine without a network: submission order, blocking calls ordered
// after earlier submissions, handles, and the rule that one failure fails everything
// after it. Runs under ASan and TSan in CI.
#include "runtime/engine.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "hvdrun/hvdrun.h"

using hvdrun::runtime::Engine;
using namespace std::chrono_literals;

namespace {

// A gate a task blocks on until the test opens it (with a deadline, so a bug fails the
// test instead of hanging it).
class Gate {
 public:
  void open() { promise_.set_value(); }
  void pass() const {
    if (future_.wait_for(10s) != std::future_status::ready)
      throw std::runtime_error("gate never opened");
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_ = promise_.get_future().share();
};

}  // namespace

TEST_CASE("tasks run in submission order on one thread, whatever order they are waited in",
          "[runtime][engine]") {
  Engine e;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::vector<Engine::Handle> handles;
  for (int i = 0; i < 50; ++i)
    handles.push_back(e.submit("task " + std::to_string(i), [&, i] {
      std::lock_guard lock(mu);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    }));
  CHECK(e.pending() == 50);
  for (auto it = handles.rbegin(); it != handles.rend(); ++it) e.wait(*it);
  CHECK(e.pending() == 0);
  REQUIRE(order.size() == 50);
  for (int i = 0; i < 50; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  for (auto id : threads) CHECK(id == threads.front());
  CHECK(threads.front() != std::this_thread::get_id());
}

TEST_CASE("a blocking call runs after every earlier submission", "[runtime][engine]") {
  Engine e;
  Gate gate;
  std::atomic<int> done{0};
  auto h1 = e.submit("slow", [&] {
    gate.pass();
    done = 1;
  });
  auto h2 = e.submit("second", [&] { done = done * 10 + 2; });
  CHECK_FALSE(e.poll(h1));
  auto t = std::thread([&] {
    std::this_thread::yield();
    gate.open();
  });
  int seen = -1;
  e.run("blocking", [&] { seen = done; });
  t.join();
  CHECK(seen == 12);
  CHECK(e.poll(h1));
  CHECK(e.poll(h2));
  e.wait(h1);
  e.wait(h2);
}

TEST_CASE("with nothing pending a blocking call runs on the caller's thread", "[runtime][engine]") {
  Engine e;
  std::thread::id ran_on;
  e.run("inline", [&] { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE("after one failure every later task fails with its cause and is not run",
          "[runtime][engine]") {
  Engine e;
  bool later_ran = false;
  auto bad = e.submit("allreduce of 4 float32", [] { throw std::runtime_error("peer 3 gone"); });
  auto later = e.submit("broadcast of 2 int64", [&] { later_ran = true; });
  CHECK_THROWS_WITH(e.wait(bad), "peer 3 gone");
  CHECK_THROWS_WITH(e.wait(later), Catch::Contains("broadcast of 2 int64 was not run") &&
                                       Catch::Contains("earlier collective failed: peer 3 gone"));
  CHECK_FALSE(later_ran);
  CHECK_THROWS_WITH(e.run("barrier", [] {}), Catch::Contains("barrier was not run"));
}

TEST_CASE("unknown and already-waited handles are refused", "[runtime][engine]") {
  Engine e;
  auto h = e.submit("one", [] {});
  e.wait(h);
  CHECK_THROWS_AS(e.wait(h), hvdrun::Error);
  CHECK_THROWS_WITH(e.poll(h), Catch::Contains("unknown or was already waited for"));
  CHECK_THROWS_AS(e.wait(12345), hvdrun::Error);
}

TEST_CASE("submitters on several threads all complete, destruction runs what is queued",
          "[runtime][engine]") {
  std::atomic<int> ran{0};
  {
    Engine e;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        std::vector<Engine::Handle> mine;
        for (int i = 0; i < 200; ++i) mine.push_back(e.submit("t", [&] { ++ran; }));
        for (int i = 0; i < 100; ++i) e.wait(mine[static_cast<std::size_t>(i)]);
        e.run("sync", [&] { ++ran; });
      });
    for (auto& t : threads) t.join();
    CHECK(ran >= 4 * 101);
    for (int i = 0; i < 10; ++i) e.submit("left", [&] { ++ran; });
  }
  CHECK(ran == 4 * 201 + 10);
}
