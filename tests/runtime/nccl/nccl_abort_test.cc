// The NCCL communicator's abort at the generation's end (runtime/nccl/abort_on_end.h), with the
// abort faked: what ncclCommAbort would be given is recorded instead, so the watching is
// tested without a GPU. The mark is the process's, as in generation_end_test.cc.
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/generation_end.h"
#include "runtime/nccl/abort_on_end.h"

using hvdrun::runtime::AbortOnEnd;
using hvdrun::runtime::generation_end;
using namespace std::chrono_literals;

namespace {

// A fake abort: records each call's reason and thread, and lets the test wait for the first.
struct FakeAbort {
  std::mutex mu;
  std::vector<std::string> reasons;
  std::optional<std::thread::id> thread;
  std::promise<void> first;

  std::function<void(const std::string&)> fn() {
    return [this](const std::string& why) {
      std::lock_guard lock(mu);
      reasons.push_back(why);
      thread = std::this_thread::get_id();
      if (reasons.size() == 1) first.set_value();
    };
  }
  std::vector<std::string> calls() {
    std::lock_guard lock(mu);
    return reasons;
  }
};

}  // namespace

TEST_CASE("nccl abort: the generation's end aborts the communicator once, with the reason",
          "[runtime][nccl]") {
  generation_end().rearm();
  FakeAbort fake;
  auto called = fake.first.get_future();
  {
    AbortOnEnd watcher(fake.fn());
    CHECK_FALSE(watcher.aborted());
    CHECK(fake.calls().empty());
    const auto t0 = std::chrono::steady_clock::now();
    generation_end().end("generation 3 ended: rank 2 on node1 exited with code 1", 3);
    REQUIRE(called.wait_for(10s) == std::future_status::ready);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    // From the watcher's thread: the mark's wakers must not block in an abort.
    CHECK(fake.thread != std::this_thread::get_id());
    // A later generation's end replaces the reason but aborts nothing more.
    generation_end().end("generation 4 ended", 4);
  }  // the destructor joins the watcher: every call it made is in `fake`
  const auto calls = fake.calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0] == "generation 3 ended: rank 2 on node1 exited with code 1");
  generation_end().rearm();
}

TEST_CASE("nccl abort: a communicator made after the end is aborted at once", "[runtime][nccl]") {
  generation_end().rearm();
  generation_end().end("the agent is gone");
  FakeAbort fake;
  auto called = fake.first.get_future();
  {
    AbortOnEnd watcher(fake.fn());
    REQUIRE(called.wait_for(10s) == std::future_status::ready);
  }
  CHECK(fake.calls() == std::vector<std::string>{"the agent is gone"});
  generation_end().rearm();
}

TEST_CASE("nccl abort: a communicator destroyed before the end is never aborted",
          "[runtime][nccl]") {
  generation_end().rearm();
  FakeAbort fake;
  { const AbortOnEnd watcher(fake.fn()); }
  // Its waker is gone with it: the end reaches only the watchers still alive.
  FakeAbort other;
  auto called = other.first.get_future();
  {
    const AbortOnEnd alive(other.fn());
    generation_end().end("generation 0 ended");
    REQUIRE(called.wait_for(10s) == std::future_status::ready);
  }
  CHECK(fake.calls().empty());
  CHECK(other.calls().size() == 1);
  generation_end().rearm();
}
