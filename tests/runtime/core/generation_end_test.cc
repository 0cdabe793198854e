// The generation's end mark (runtime/core/generation_end.h): a collective waiting for a peer
// that will never come fails within moments of the mark, with its reason, instead of at
// the op timeout (60 s here), on both host paths: the host's shared segment and the
// leaders' frame mesh across hosts. Threads stand in for ranks; the mark is the process's,
// so this file is a test program of its own.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/memory_store.h"
#include "runtime/core/generation_end.h"
#include "runtime/frames/frame_comm.h"
#include "runtime/shm/shm_comm.h"

using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::runtime::generation_end;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kReason = "generation 0 ended: rank 5 on host node3 exited with code 1";

hvdrun::runtime::ShmMember member(int local_rank) {
  hvdrun::runtime::ShmMember me;
  me.local_rank = local_rank;
  me.local_size = 2;
  me.global_rank = local_rank;
  me.global_size = 2;
  me.host = "localhost";
  return me;
}

// Rank 0 runs one allreduce with rank 1, then a second one that rank 1 never joins
// (it holds on, alive, until `release`); `make` builds rank r's communicator and
// `allreduce` runs one on it. Returns rank 0's error and how long after the mark it came.
template <typename Make, typename Allreduce>
std::pair<std::string, Clock::duration> strand_rank0(Make make, Allreduce allreduce) {
  std::promise<void> second_started;
  std::promise<void> release;
  auto released = release.get_future().share();
  auto rank1 = std::async(std::launch::async, [&] {
    auto comm = make(1);
    allreduce(*comm);
    released.wait();
  });
  auto rank0 = std::async(std::launch::async, [&]() -> std::string {
    std::unique_ptr<typename decltype(make(0))::element_type> comm;
    try {
      comm = make(0);
      allreduce(*comm);
    } catch (const std::exception& e) {
      second_started.set_value();
      return std::string("the first allreduce failed: ") + e.what();
    }
    second_started.set_value();
    try {
      allreduce(*comm);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "the second allreduce completed without rank 1";
  });
  second_started.get_future().wait();
  // Let rank 0 settle into its wait; the outcome must be the same if it has not yet.
  std::this_thread::sleep_for(300ms);
  const auto t0 = Clock::now();
  generation_end().end(kReason);
  const auto status = rank0.wait_for(30s);
  const auto took = Clock::now() - t0;
  std::string error =
      status == std::future_status::ready ? rank0.get() : "still waiting after 30 s";
  release.set_value();
  rank1.get();
  if (status != std::future_status::ready) rank0.wait();
  return {error, took};
}

}  // namespace

TEST_CASE("generation end: a shared-segment wait fails at once with the reason", "[runtime][shm]") {
  generation_end().rearm();
  const std::string name = "hvdrun-test-genend-" + std::to_string(::getpid());
  const auto deadline = Clock::now() + 20s;
  auto [error, took] = strand_rank0(
      [&](int r) {
        return std::make_unique<hvdrun::runtime::ShmComm>(nullptr, name, member(r), deadline, 60s);
      },
      [](hvdrun::runtime::ShmComm& c) {
        std::vector<float> v(1000, 1.0F);
        c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      });
  CHECK_THAT(error, Catch::Contains(kReason) && Catch::Contains("hvd.elastic.run"));
  CHECK(took < 5s);  // the op timeout is 60 s

  // A collective started after the end fails before it waits for anyone (the segment
  // is built before the end: building one needs the peers, as every collective does).
  generation_end().rearm();
  const std::string name2 = name + "-after";
  std::promise<void> release;
  auto released = release.get_future().share();
  auto other = std::async(std::launch::async, [&] {
    hvdrun::runtime::ShmComm c(nullptr, name2, member(1), Clock::now() + 20s, 60s);
    released.wait();
  });
  std::string after;
  Clock::duration after_took{};
  try {
    hvdrun::runtime::ShmComm c(nullptr, name2, member(0), Clock::now() + 20s, 60s);
    generation_end().end(kReason);
    std::vector<float> v(4, 1.0F);
    const auto t0 = Clock::now();
    try {
      c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      after = "the allreduce completed without rank 1";
    } catch (const std::exception& e) {
      after = e.what();
    }
    after_took = Clock::now() - t0;
  } catch (const std::exception& e) {
    after = std::string("building the segment failed: ") + e.what();
  }
  release.set_value();
  other.get();
  CHECK_THAT(after, Catch::Contains(kReason));
  CHECK(after_took < 5s);

  // The next generation starts unended: its collectives run.
  generation_end().rearm();
  CHECK_FALSE(generation_end().ended());
  const std::string name3 = name + "-next";
  auto sums = std::vector<std::future<float>>();
  for (int r = 0; r < 2; ++r)
    sums.push_back(std::async(std::launch::async, [&, r] {
      hvdrun::runtime::ShmComm c(nullptr, name3, member(r), Clock::now() + 20s, 60s);
      std::vector<float> v(3, static_cast<float>(r + 1));
      c.allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      return v[2];
    }));
  for (auto& s : sums) CHECK(s.get() == 3.0F);
}

TEST_CASE("generation end: a wait across hosts fails at once with the reason",
          "[runtime][frames]") {
  generation_end().rearm();
  hvdrun::rendezvous::MemoryStore store;
  const std::string secret(64, 's');
  auto [error, took] = strand_rank0(
      [&](int r) {
        return std::make_unique<hvdrun::runtime::FrameComm>(
            store, "t/genend", r, 2, "127.0.0." + std::to_string(r + 1), secret, 60s, 20s);
      },
      [](hvdrun::runtime::FrameComm& c) {
        std::vector<float> v(100000, 1.0F);
        c.allreduce(v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      });
  CHECK_THAT(error, Catch::Contains(kReason));
  CHECK(took < 5s);  // the op timeout is 60 s
  generation_end().rearm();
}

TEST_CASE("generation end: wakers run once per end, and at once when registered late",
          "[runtime]") {
  generation_end().rearm();
  int runs = 0;
  std::string seen;
  {
    hvdrun::runtime::EndWaker w([&](const std::string& why) {
      ++runs;
      seen = why;
    });
    generation_end().end("first");
    generation_end().end("second");  // the first reason wins
    CHECK(runs == 1);
    CHECK(seen == "first");
    CHECK(generation_end().reason() == "first");
    hvdrun::runtime::EndWaker late([&](const std::string& why) { seen = "late: " + why; });
    CHECK(seen == "late: first");
  }
  generation_end().rearm();
  generation_end().end("after the wakers went");
  CHECK(runs == 1);
  generation_end().rearm();
  CHECK(generation_end().reason().empty());
}

TEST_CASE("generation end: a later generation's end replaces an earlier one's", "[runtime]") {
  generation_end().rearm();
  generation_end().end("generation 1 ended", 1);
  CHECK(generation_end().ended_generation() == 1);
  generation_end().end("generation 1 ended again", 1);  // the same generation: ignored
  CHECK(generation_end().reason() == "generation 1 ended");
  generation_end().end("generation 2 ended", 2);  // ended while re-forming: counts
  CHECK(generation_end().ended_generation() == 2);
  CHECK(generation_end().reason() == "generation 2 ended");
  generation_end().end("generation 1, late", 1);
  CHECK(generation_end().ended_generation() == 2);
  generation_end().end("the agent is gone");  // every generation
  CHECK(generation_end().ended_generation() == hvdrun::runtime::GenerationEnd::kEveryGeneration);
  generation_end().rearm();
  CHECK_FALSE(generation_end().ended());
  CHECK(generation_end().ended_generation() == hvdrun::runtime::GenerationEnd::kEveryGeneration);
}
