// The collective engine and negotiation without a network (engine_harness.h): agreement,
// mismatches, names in any order, duplicate names, join's stand-ins, shutdown, fatal
// failures and stall reports. The round's steady state and its fast path are in
// engine_round_test.cc. Runs under ASan and TSan in CI.
#include "runtime/engine/engine.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/engine/negotiation.h"
#include "tests/runtime/engine/engine_harness.h"

using hvdrun::DataType;
using hvdrun::runtime::DuplicateName;
using hvdrun::runtime::Engine;
using hvdrun::runtime::Kind;
using hvdrun::runtime::make_request;
using hvdrun::runtime::Ready;
using hvdrun::runtime::StallPolicy;
using hvdrun::runtime::Window;
using hvdrun::testing::allreduce;
using hvdrun::testing::error_of;
using hvdrun::testing::on_each;
using hvdrun::testing::Ranks;
using hvdrun::testing::small_allreduce;
using namespace std::chrono_literals;

TEST_CASE("negotiation: a mismatch names the collective and both ranks' tensors",
          "[runtime][negotiation]") {
  std::vector<Window> t(2);
  const std::int64_t a[] = {10}, b[] = {3};
  t[0].requests[0] =
      make_request(Kind::kAllreduce, 10, DataType::kFloat32, "grad.fc1", a, 1, nullptr);
  t[1].requests[0] =
      make_request(Kind::kAllreduce, 3, DataType::kFloat32, "grad.fc1", b, 1, nullptr);
  t[0].count = t[1].count = 1;
  hvdrun::runtime::JoinBook book;
  auto p = hvdrun::runtime::plan(t, book);
  REQUIRE(p.ready.size() == 1);
  CHECK(p.ready[0].error == "allreduce 'grad.fc1': rank 0 has float32[10], rank 1 has float32[3]");

  // dtype, op, root, kind and scale factors each get their own words.
  t[1].requests[0] =
      make_request(Kind::kAllreduce, 10, DataType::kInt32, "grad.fc1", a, 1, nullptr);
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error ==
        "allreduce 'grad.fc1': rank 0 has float32[10], rank 1 has int32[10]");
  t[1].requests[0] = t[0].requests[0];
  t[1].requests[0].op = static_cast<std::uint8_t>(hvdrun::ReduceOp::kMax);
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error.find(
            "rank 0 reduces with Sum, rank 1 with Max") != std::string::npos);
  t[1].requests[0] = t[0].requests[0];
  t[1].requests[0].postscale = 2.0;
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error.find("postscale") != std::string::npos);
  t[0].requests[0] = make_request(Kind::kBroadcast, 10, DataType::kFloat32, "w", a, 1, nullptr);
  t[1].requests[0] = t[0].requests[0];
  t[1].requests[0].root = 1;
  t[0].requests[0].root = 0;
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error ==
        "broadcast 'w': rank 0 broadcasts from root 0, rank 1 from root 1");
  // Unnamed: matched by position; a barrier against an allgather is a mismatch.
  t[0].requests[0] =
      make_request(Kind::kAllgather, 4, DataType::kFloat32, nullptr, nullptr, 0, nullptr);
  t[1].requests[0] =
      make_request(Kind::kBarrier, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr);
  t[0].requests[0].seq = t[1].requests[0].seq = 7;
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error ==
        "allgather #7: rank 0 submitted allgather float32[4], rank 1 submitted barrier (no "
        "tensor). Every rank must submit its unnamed collectives in the same order");
  // Allgather: first dimensions may differ, the others may not.
  const std::int64_t s0[] = {2, 5}, s1[] = {7, 5}, s2[] = {7, 4};
  t[0].requests[0] = make_request(Kind::kAllgather, 5, DataType::kFloat32, "g", s0, 2, "float32");
  t[1].requests[0] = make_request(Kind::kAllgather, 5, DataType::kFloat32, "g", s1, 2, "float32");
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error.empty());
  t[1].requests[0] = make_request(Kind::kAllgather, 5, DataType::kFloat32, "g", s2, 2, "float32");
  CHECK(hvdrun::runtime::plan(t, book).ready[0].error ==
        "allgather 'g': rank 0 has float32[2, 5], rank 1 has float32[7, 4] (allgather: only "
        "the first dimension may differ)");
}

TEST_CASE("engine: unnamed collectives run in submission order, whatever order they are waited in",
          "[runtime][engine]") {
  Ranks ranks(2);
  std::mutex mu;
  std::vector<int> order[2];
  on_each(2, [&](int r) {
    std::vector<Engine::Handle> hs;
    for (int i = 0; i < 50; ++i)
      hs.push_back(ranks[r].submit(allreduce(4), [&, r, i](const Ready&) {
        std::lock_guard lock(mu);
        order[r].push_back(i);
      }));
    for (auto it = hs.rbegin(); it != hs.rend(); ++it) ranks[r].wait(*it);
    EXPECT(ranks[r].pending() == 0);
  });
  for (auto& o : order) {
    REQUIRE(o.size() == 50);
    for (int i = 0; i < 50; ++i) CHECK(o[static_cast<std::size_t>(i)] == i);
  }
}

TEST_CASE("engine: a mismatch fails that collective on every rank and the next one succeeds",
          "[runtime][engine]") {
  Ranks ranks(2);
  std::atomic<int> ran{0};
  on_each(2, [&](int r) {
    auto err =
        error_of([&] { ranks[r].run(allreduce(r == 0 ? 10 : 3), [&](const Ready&) { ++ran; }); });
    EXPECT(err == "hvdrun: allreduce #0: rank 0 has float32[10], rank 1 has float32[3]");
    ranks[r].run(allreduce(5), [&](const Ready&) { ++ran; });
  });
  CHECK(ran == 2);  // only the agreed one moved data, on both ranks
  CHECK(ranks[0].failure().empty());
}

TEST_CASE("engine: named collectives meet whatever order the ranks submit them in",
          "[runtime][engine]") {
  Ranks ranks(3);
  std::mutex mu;
  std::vector<std::string> order[3];
  const char* names[] = {"a", "b", "c", "d"};
  on_each(3, [&](int r) {
    std::vector<Engine::Handle> hs;
    for (int i = 0; i < 4; ++i) {
      const char* name = names[(i + r) % 4];  // each rank starts elsewhere
      hs.push_back(ranks[r].submit(allreduce(8, name), [&, r, name](const Ready&) {
        std::lock_guard lock(mu);
        order[r].emplace_back(name);
      }));
    }
    for (auto h : hs) ranks[r].wait(h);
  });
  REQUIRE(order[0].size() == 4);
  CHECK(order[1] == order[0]);  // one agreed order on every rank
  CHECK(order[2] == order[0]);
}

TEST_CASE("engine: a name still in flight is refused, and free again once waited for",
          "[runtime][engine]") {
  Ranks ranks(2);
  on_each(2, [&](int r) {
    if (r == 1) std::this_thread::sleep_for(50ms);  // rank 0 submits twice before rank 1 comes
    auto h = ranks[r].submit(allreduce(4, "dup"), [](const Ready&) {});
    bool refused = false;
    try {
      ranks[r].submit(allreduce(4, "dup"), [](const Ready&) {});
    } catch (const DuplicateName&) {
      refused = true;
    }
    EXPECT(refused);
    ranks[r].wait(h);
    ranks[r].wait(ranks[r].submit(allreduce(4, "dup"), [](const Ready&) {}));
  });
}

TEST_CASE(
    "engine: a joined rank stands in for allreduce and barrier, allgather and broadcast "
    "fail on the others, join returns the last rank to join",
    "[runtime][engine]") {
  Ranks ranks(3);
  std::vector<std::string> errors(3);
  std::vector<int> last(3, -1);
  on_each(3, [&](int r) {
    if (r == 1) {  // joins first, at once
      last[1] = ranks[1].join();
      return;
    }
    for (int i = 0; i < 5; ++i) ranks[r].run(allreduce(16), [](const Ready&) {});
    ranks[r].run(make_request(Kind::kBarrier, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr),
                 nullptr);
    errors[r] = error_of([&] {
      ranks[r].run(make_request(Kind::kAllgather, 2, DataType::kFloat32, "g", nullptr, 0, nullptr),
                   [](const Ready&) {});
    });
    if (r == 2) std::this_thread::sleep_for(100ms);  // rank 2 joins last
    last[r] = ranks[r].join();
  });
  for (int r : {0, 2})
    CHECK(errors[r] ==
          "hvdrun: allgather 'g' cannot run while rank 1 has joined: a joined rank stands in for "
          "allreduce and barrier only (as in Horovod); finish every allgather before join()");
  CHECK(last == std::vector<int>{2, 2, 2});
  std::lock_guard lock(ranks.mu);
  CHECK(ranks.stand_ins.size() == 6);  // five allreduces and the barrier, by rank 1 only
  for (const auto& s : ranks.stand_ins) CHECK(s.rfind("1:", 0) == 0);
  // After join, the ranks' unnamed positions agree again: the next collective meets.
  on_each(3, [&](int r) { ranks[r].run(allreduce(1), [](const Ready&) {}); });
}

TEST_CASE("engine: shutdown waits for every rank and fails what can then never complete",
          "[runtime][engine]") {
  Ranks ranks(2);
  std::string orphan;
  on_each(2, [&](int r) {
    Engine::Handle h = 0;
    if (r == 0) h = ranks[0].submit(allreduce(4, "only-on-rank-0"), [](const Ready&) {});
    ranks[r].run(allreduce(1), [](const Ready&) {});  // both still agree on this
    EXPECT(ranks[r].shutdown());
    if (r == 0) orphan = error_of([&] { ranks[0].wait(h); });
  });
  CHECK(orphan ==
        "hvdrun: allreduce 'only-on-rank-0' can never complete: rank 1 shut down without "
        "submitting it");
}

TEST_CASE("engine: a transport failure fails the collective and every later one",
          "[runtime][engine]") {
  Ranks ranks(2);
  ranks.net.fail();
  auto first = error_of([&] { ranks[0].run(allreduce(4), [](const Ready&) {}); });
  CHECK(first == "transport broken");
  auto later = error_of([&] { ranks[0].run(allreduce(4), [](const Ready&) {}); });
  CHECK(later.find("was not run because an earlier collective failed: transport broken") !=
        std::string::npos);
  CHECK_FALSE(ranks[0].shutdown());
}

TEST_CASE(
    "engine: a transport failure in the round of a small allreduce reduced in place fails it "
    "and every later one",
    "[runtime][engine][cache]") {
  Ranks ranks(2);
  const std::uint64_t tokens[2] = {Engine::new_token(), Engine::new_token()};
  // Twice together: cached, and the second call is the steady state.
  on_each(2, [&](int r) {
    for (int i = 0; i < 2; ++i)
      EXPECT(small_allreduce(ranks[r], 1.0F, 2.0F, hvdrun::ReduceOp::kSum, tokens[r])[1] == 4.0F);
  });
  ranks.net.fail();
  auto first =
      error_of([&] { small_allreduce(ranks[0], 1.0F, 2.0F, hvdrun::ReduceOp::kSum, tokens[0]); });
  CHECK(first == "transport broken");
  auto later =
      error_of([&] { small_allreduce(ranks[0], 1.0F, 2.0F, hvdrun::ReduceOp::kSum, tokens[0]); });
  CHECK(later ==
        "hvdrun: allreduce was not run because an earlier collective failed: "
        "transport broken");
  CHECK(ranks[0].pending() == 0);
  CHECK_FALSE(ranks[0].shutdown());
}

TEST_CASE("engine: with nothing pending a blocking collective runs on the caller's thread",
          "[runtime][engine]") {
  Ranks ranks(1);
  std::thread::id ran_on;
  ranks[0].run(allreduce(1), [&](const Ready&) { ran_on = std::this_thread::get_id(); });
  CHECK(ran_on == std::this_thread::get_id());
}

TEST_CASE("engine: a stall is reported once, naming the missing rank and what it has submitted",
          "[runtime][engine]") {
  StallPolicy stall;
  stall.check = 300ms;
  Ranks ranks(2, stall);
  auto h0 = ranks[0].submit(allreduce(4, "x"), [](const Ready&) {});
  auto h1 = ranks[1].submit(allreduce(4, "y"), [](const Ready&) {});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    {
      std::lock_guard lock(ranks.mu);
      if (ranks.stalls.size() >= 2) break;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(10ms);
  }
  {
    std::lock_guard lock(ranks.mu);
    std::string both = ranks.stalls[0] + "\n" + ranks.stalls[1];
    CHECK(both.find("for allreduce 'x' float32[4]; missing on 1; rank 1 has "
                    "submitted allreduce 'y'") != std::string::npos);
    CHECK(both.find("for allreduce 'y' float32[4]; missing on 0; rank 0 has submitted "
                    "allreduce 'x'") != std::string::npos);
  }
  // Both late halves arrive: the stall ends and nothing more is reported.
  auto h0b = ranks[0].submit(allreduce(4, "y"), [](const Ready&) {});
  auto h1b = ranks[1].submit(allreduce(4, "x"), [](const Ready&) {});
  for (auto [e, h] : {std::pair{0, h0}, {0, h0b}, {1, h1}, {1, h1b}}) ranks[e].wait(h);
  std::lock_guard lock(ranks.mu);
  CHECK(ranks.stalls.size() == 2);
}

TEST_CASE(
    "engine: a stall inside the round of a small allreduce reduced in place names that "
    "collective, and the call completes once the late rank comes",
    "[runtime][engine][cache]") {
  StallPolicy stall;
  stall.check = 300ms;
  Ranks ranks(2, stall);
  const std::uint64_t tokens[2] = {Engine::new_token(), Engine::new_token()};
  auto call = [&](int r, float x) {
    return small_allreduce(ranks[r], x, 1.0F, hvdrun::ReduceOp::kSum, tokens[r])[0];
  };
  // Twice together: the request is cached, and the second call is the steady state.
  on_each(2, [&](int r) {
    for (int i = 0; i < 2; ++i) EXPECT(call(r, static_cast<float>(r + 1)) == 3.0F);
  });
  // Rank 0 calls a third time alone and waits inside the round.
  auto late = std::async(std::launch::async, [&] { return call(0, 5.0F); });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    {
      std::lock_guard lock(ranks.mu);
      if (!ranks.stalls.empty()) break;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(10ms);
  }
  {
    std::lock_guard lock(ranks.mu);
    CHECK(ranks.stalls[0].find("this rank has waited") != std::string::npos);
    CHECK(ranks.stalls[0].find("for allreduce #2 float32[2]") != std::string::npos);
    CHECK(ranks.stalls[0].find(" more") == std::string::npos);
  }
  CHECK(call(1, 7.0F) == 12.0F);
  CHECK(late.get() == 12.0F);
  std::lock_guard lock(ranks.mu);
  CHECK(ranks.stalls.size() == 1);
}

TEST_CASE("engine: one rank's shutdown shuts the others down, failing what they wait for",
          "[runtime][engine]") {
  Ranks ranks(2);
  std::string err;
  on_each(2, [&](int r) {
    if (r == 0) {
      EXPECT(ranks[0].shutdown());
      return;
    }
    err = error_of([&] {
      ranks[1].run(make_request(Kind::kBarrier, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr),
                   nullptr);
    });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!ranks[1].closed()) {
      if (std::chrono::steady_clock::now() > deadline) {
        EXPECT(!"rank 1 was not shut down within 10 s");
        return;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  CHECK(err == "hvdrun: barrier #0 can never complete: rank 0 shut down without submitting it");
  auto later = error_of([&] { ranks[1].run(allreduce(1), [](const Ready&) {}); });
  CHECK(later.find("after rank 0 shut the job down, which shut this rank down too; call init() "
                   "to join again") != std::string::npos);
}
