// The engine's round without a network (engine_harness.h): the request cache and the
// briefs of the steady state, small allreduces riding in the round and reduced from it, and
// the fast path of a blocking collective announced alone, agreeing or falling back into the
// general round. Runs under ASan and TSan in CI.
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/negotiation.h"
#include "tests/runtime/engine/engine_harness.h"

using hvdrun::DataType;
using hvdrun::runtime::Engine;
using hvdrun::runtime::Ready;
using hvdrun::runtime::Window;
using hvdrun::testing::allreduce;
using hvdrun::testing::error_of;
using hvdrun::testing::on_each;
using hvdrun::testing::Ranks;
using hvdrun::testing::small_allreduce;
using namespace std::chrono_literals;

TEST_CASE(
    "engine: a small allreduce rides in the round and is reduced from it, joined ranks "
    "contributing nothing",
    "[runtime][engine]") {
  Ranks ranks(3);
  std::vector<float> out(3 * 4, -1.0F);
  std::vector<int> inline_seen(3, -1);
  on_each(3, [&](int r) {
    if (r == 2) {
      ranks[2].join();
      return;
    }
    const float in[4] = {1.0F * static_cast<float>(r + 1), 2, 3, 4};
    ranks[r].run(
        allreduce(4),
        [&, r](const Ready& rd) {
          inline_seen[static_cast<std::size_t>(r)] = rd.inline_data ? 1 : 0;
          if (!rd.inline_data) return;
          hvdrun::runtime::reduce_inline(rd, &out[static_cast<std::size_t>(r) * 4], 4,
                                         DataType::kFloat32, hvdrun::ReduceOp::kSum);
        },
        in);
    ranks[r].join();
  });
  CHECK(inline_seen == std::vector<int>{1, 1, -1});
  for (int r = 0; r < 2; ++r) {
    const float* o = &out[static_cast<std::size_t>(r) * 4];
    CHECK(o[0] == 3.0F);  // 1 + 2, and nothing from the joined rank
    CHECK(o[3] == 8.0F);
  }
  std::lock_guard lock(ranks.mu);
  CHECK(ranks.stand_ins.empty());  // no second exchange to stand in for
}

TEST_CASE("engine: a repeated collective is agreed from cache ids, one small exchange per call",
          "[runtime][engine][cache]") {
  Ranks ranks(2);
  std::atomic<int> ran{0};
  on_each(2, [&](int r) {
    for (int i = 0; i < 10; ++i)
      ranks[r].run(allreduce(1000, "grad"), [&](const Ready&) { ++ran; });
  });
  CHECK(ran == 20);
  // The first round needs whole windows (nothing cached yet): brief + windows; the other
  // nine are briefs alone. Two ranks each.
  CHECK(ranks.net.exchanges() == 2 * (2 + 9));
}

TEST_CASE("engine: mismatches are found whether the requests are cached or not",
          "[runtime][engine][cache]") {
  Ranks ranks(2);
  on_each(2, [&](int r) {
    // Both cached by an agreed round first.
    ranks[r].run(allreduce(10, "a"), [](const Ready&) {});
    ranks[r].run(allreduce(3, "a"), [](const Ready&) {});
    ranks[r].run(allreduce(10), [](const Ready&) {});
    ranks[r].run(allreduce(3), [](const Ready&) {});
    // Each rank's request is cached, but they differ: named...
    auto err =
        error_of([&] { ranks[r].run(allreduce(r == 0 ? 10 : 3, "a"), [](const Ready&) {}); });
    EXPECT(err == "hvdrun: allreduce 'a': rank 0 has float32[10], rank 1 has float32[3]");
    // ... and unnamed (position 2, after the two agreed unnamed ones).
    err = error_of([&] { ranks[r].run(allreduce(r == 0 ? 3 : 10), [](const Ready&) {}); });
    EXPECT(err == "hvdrun: allreduce #2: rank 0 has float32[3], rank 1 has float32[10]");
    // One cached, one never seen.
    err = error_of([&] { ranks[r].run(allreduce(r == 0 ? 10 : 7, "a"), [](const Ready&) {}); });
    EXPECT(err == "hvdrun: allreduce 'a': rank 0 has float32[10], rank 1 has float32[7]");
    ranks[r].run(allreduce(10, "a"), [](const Ready&) {});  // and the job goes on
  });
  CHECK(ranks[0].failure().empty());
}

TEST_CASE(
    "negotiation: the request cache gives the same ids for the same rounds and starts "
    "again when full",
    "[runtime][negotiation][cache]") {
  using hvdrun::runtime::Brief;
  using hvdrun::runtime::RequestCache;
  RequestCache cache(2);
  hvdrun::runtime::JoinBook book;
  auto round = [&](std::size_t count, const char* name) {
    std::vector<Window> t(2);
    for (auto& w : t) {
      w.requests[0] = allreduce(count, name);
      w.count = 1;
    }
    cache.learn(t, hvdrun::runtime::plan(t, book));
    return cache.find(allreduce(count, name));
  };
  CHECK(cache.find(allreduce(4, "x")) == -1);
  CHECK(round(4, "x") == 0);
  CHECK(round(5, "x") == 1);
  CHECK(round(4, "x") == 0);  // known: not added twice
  CHECK(cache.size() == 2);
  CHECK(round(6, "y") == 0);  // full: starts again with only the new request
  CHECK(cache.size() == 1);
  CHECK(cache.find(allreduce(4, "x")) == -1);
  // A request that differs only in its seq is the same entry; in anything else, not.
  auto q = allreduce(6, "y");
  q.seq = 42;
  CHECK(cache.find(q) == 0);
  q.prescale = 0.5;
  CHECK(cache.find(q) == -1);

  // A brief of cached requests rebuilds the window; an uncached one says so.
  Window w;
  w.requests[0] = allreduce(6, "y");
  w.requests[1] = allreduce(9, "z");
  w.count = 1;
  Brief b;
  hvdrun::runtime::brief_of(w, cache, b);
  CHECK(b.uncached == 0);
  // Packed: a header and one entry travel, not the whole struct; a payload follows the
  // entries at once.
  CHECK(b.bytes() == 32);
  w.inline_bytes = 8;
  std::memcpy(w.payload, "payload!", 8);
  hvdrun::runtime::brief_of(w, cache, b);
  CHECK(b.bytes() == 40);
  CHECK(std::memcmp(b.payload(), "payload!", 8) == 0);
  CHECK(b.payload() == b.body + 16);
  std::vector<Window> rebuilt;
  hvdrun::runtime::expand({b, b}, cache, rebuilt);
  REQUIRE(rebuilt.size() == 2);
  CHECK(hvdrun::runtime::label(rebuilt[1].requests[0]) == "allreduce 'y'");
  CHECK(rebuilt[1].requests[0].count == 6);
  w.count = 2;
  hvdrun::runtime::brief_of(w, cache, b);
  CHECK(b.uncached == 1);
}

TEST_CASE("engine: a small allreduce decided from briefs is reduced from their payloads",
          "[runtime][engine][cache]") {
  Ranks ranks(3);
  on_each(3, [&](int r) {
    for (int i = 0; i < 5; ++i) {
      float in[2] = {static_cast<float>(r + i), 1.0F};
      float out[2] = {};
      ranks[r].run(
          allreduce(2, "small"),
          [&](const Ready& rd) {
            EXPECT(rd.inline_data);
            hvdrun::runtime::reduce_inline(rd, out, 2, DataType::kFloat32, hvdrun::ReduceOp::kSum);
          },
          in);
      EXPECT(out[0] == static_cast<float>(3 * i + 3));
      EXPECT(out[1] == 3.0F);
    }
  });
  CHECK(ranks.net.exchanges() == 3 * (2 + 4));
}

TEST_CASE(
    "negotiation: a few floats summed from the round's payloads give the bits of the "
    "reduction loops",
    "[runtime][negotiation]") {
  std::uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525U + 1013904223U;
    return static_cast<float>(static_cast<std::int32_t>(state)) / 3.0e7F;  // varied exponents
  };
  constexpr int kRanks = 5;
  constexpr std::size_t kStride = 64;
  for (const auto op : {hvdrun::ReduceOp::kSum, hvdrun::ReduceOp::kAverage}) {
    for (std::size_t count = 1; count <= 9; ++count) {  // 9: past the scalar path
      std::vector<unsigned char> base(kStride * kRanks);
      for (auto& b : base) b = 0;
      for (int r = 0; r < kRanks; ++r)
        for (std::size_t i = 0; i < count; ++i) {
          const float x = next() * static_cast<float>(1 << (i % 7));
          std::memcpy(base.data() + r * kStride + i * sizeof x, &x, sizeof x);
        }
      Ready rd;
      rd.inline_data = true;
      rd.inline_base = base.data();
      rd.inline_stride = kStride;
      rd.ranks = kRanks;
      rd.absent = {kRanks};  // none of the ranks: reduce_inline's general loop
      std::vector<float> fast(count), here(count), general(count);
      hvdrun::runtime::reduce_payloads(base.data(), kStride, kRanks, fast.data(), count,
                                       DataType::kFloat32, op);
      hvdrun::runtime::reduce_payloads_here(base.data(), kStride, kRanks, here.data(), count,
                                            DataType::kFloat32, op);
      hvdrun::runtime::reduce_inline(rd, general.data(), count, DataType::kFloat32, op);
      CHECK(std::memcmp(fast.data(), general.data(), count * sizeof(float)) == 0);
      CHECK(std::memcmp(here.data(), general.data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE(
    "engine: a blocking small allreduce whose input only some ranks carried runs every "
    "rank's body, with the right sums",
    "[runtime][engine][cache]") {
  constexpr int kRanks = 3;
  Ranks ranks(kRanks);
  std::atomic<int> bodies{0};
  on_each(kRanks, [&](int r) {
    const std::uint64_t token = Engine::new_token();
    for (int i = 0; i < 6; ++i) {
      // Rank 1 keeps its input out of the round on odd calls.
      const bool carry = r != 1 || i % 2 == 0;
      const auto out =
          small_allreduce(ranks[r], static_cast<float>(r + i), 1.0F, hvdrun::ReduceOp::kSum, token,
                          carry, [&](const Ready& rd, float* o) {
                            ++bodies;
                            if (rd.inline_data) return;
                            // What the transport would move: the sums.
                            o[0] = static_cast<float>(3 * i + 3);
                            o[1] = 3.0F;
                          });
      EXPECT(out[0] == static_cast<float>(3 * i + 3));
      EXPECT(out[1] == 3.0F);
    }
  });
  // Every rank's body ran on the first call (not cached yet) and on the three calls where
  // rank 1 did not carry its input; on the other two the result was reduced in place.
  CHECK(bodies == kRanks * (1 + 3));
}

TEST_CASE(
    "engine: a blocking small allreduce with an InlineResult is reduced into its output once "
    "agreed from briefs, and its token survives the cache starting again",
    "[runtime][engine][cache]") {
  constexpr int kRanks = 3;
  Ranks ranks(kRanks);
  std::atomic<int> bodies{0};
  on_each(kRanks, [&](int r) {
    const std::uint64_t token = Engine::new_token();
    auto check = [&](int i) {
      const auto out =
          small_allreduce(ranks[r], static_cast<float>(r + i), 0.5F, hvdrun::ReduceOp::kAverage,
                          token, true, [&](const Ready& rd, float*) {
                            ++bodies;
                            EXPECT(rd.inline_data);
                          });
      EXPECT(out[0] == static_cast<float>(i + 1));  // (0 + 1 + 2 + 3i) / 3
      EXPECT(out[1] == 0.5F);
    };
    for (int i = 0; i < 4; ++i) check(i);
    // Enough other requests to fill the cache: it starts again, and the id the token
    // recalls names another request now. The next call must look its request up again.
    for (std::size_t k = 0; k < hvdrun::runtime::kCacheCapacity + 4; ++k) {
      float x = 1.0F;
      ranks[r].run(allreduce(1, ("filler" + std::to_string(k)).c_str()), nullptr, &x);
    }
    for (int i = 4; i < 8; ++i) check(i);
  });
  // The body ran only where the request was not cached yet: the first call, and the first
  // after the cache started again.
  CHECK(bodies == 2 * kRanks);
}

TEST_CASE(
    "engine: on one host a 4 KiB allreduce rides in the round, across hosts it moves apart "
    "and the round's blocks keep the hosts' size",
    "[runtime][engine][cache]") {
  using hvdrun::runtime::Brief;
  using hvdrun::runtime::kInlineBytes;
  using hvdrun::runtime::kInlineBytesLocal;
  constexpr std::size_t kFloats = kInlineBytesLocal / sizeof(float);
  for (const std::size_t limit : {kInlineBytesLocal, kInlineBytes}) {
    Ranks ranks(2, {}, limit);
    std::atomic<int> carried{0}, apart{0};
    on_each(2, [&](int r) {
      std::vector<float> in(kFloats), out(kFloats, -1.0F);
      for (int i = 0; i < 3; ++i) {
        for (std::size_t k = 0; k < kFloats; ++k) in[k] = static_cast<float>(r + i) + k;
        ranks[r].run(
            allreduce(kFloats, "4k"),
            [&](const Ready& rd) {
              if (!rd.inline_data) {
                ++apart;
                return;
              }
              ++carried;
              hvdrun::runtime::reduce_inline(rd, out.data(), kFloats, DataType::kFloat32,
                                             hvdrun::ReduceOp::kSum);
            },
            in.data());
        if (limit == kInlineBytesLocal) {
          EXPECT(out[0] == static_cast<float>(2 * i + 1));
          EXPECT(out[kFloats - 1] == static_cast<float>(2 * i + 1 + 2 * (kFloats - 1)));
        }
      }
    });
    if (limit == kInlineBytesLocal) {
      CHECK(carried == 6);
      CHECK(apart == 0);
      CHECK(ranks.net.largest() == sizeof(hvdrun::runtime::Window));
    } else {
      CHECK(carried == 0);
      CHECK(apart == 6);
      // Whole blocks cross hosts: cut to what the hosts' limit can fill.
      CHECK(ranks.net.largest() == Window::block(kInlineBytes));
      CHECK(Brief::block(kInlineBytes) == 16 + 8 * 16 + kInlineBytes);
    }
  }
}

TEST_CASE("engine: named collectives far apart in the ranks' queues still meet",
          "[runtime][engine]") {
  // Each rank announces every collective once, kWindow per round, and remembers what the
  // others announced: with 3 x kWindow collectives submitted in opposite orders, no
  // round's windows share a name until the queues are half announced.
  constexpr int kCount = 3 * hvdrun::runtime::kWindow;
  Ranks ranks(2);
  std::atomic<int> ran{0};
  on_each(2, [&](int r) {
    std::vector<Engine::Handle> hs;
    for (int i = 0; i < kCount; ++i) {
      const int k = r == 0 ? i : kCount - 1 - i;
      const std::string name = "far." + std::to_string(k);
      hs.push_back(ranks[r].submit(allreduce(4, name.c_str()), [&](const Ready&) { ++ran; }));
    }
    for (auto h : hs) ranks[r].wait(h);
    EXPECT(ranks[r].pending() == 0);
  });
  CHECK(ran == 2 * kCount);
  CHECK(ranks[0].failure().empty());
}

TEST_CASE(
    "engine: a blocking collective sent from the steady state meets ranks that announced "
    "something else, and the round goes on from what they announced",
    "[runtime][engine][cache]") {
  // Rank 0 is idle with cached requests, so each of its blocking collectives is sent at
  // once as a brief of its own; rank 1 always has "b" queued before it reaches "a". Rank
  // 0's round therefore never agrees on its own: it must be planned as any other round,
  // what rank 0 announced in it counting, and every collective completes (a lost
  // announcement would leave the ranks waiting on each other until the fake net's
  // deadline).
  Ranks ranks(2);
  std::atomic<int> ran{0};
  on_each(2, [&](int r) {
    // The ranks announce each collective in different rounds, so none rides in a round
    // (Ready::inline_data) and the fake net moves no data: the bodies count the runs.
    auto body = [&ran](const Ready&) { ++ran; };
    for (const char* name : {"a", "b"}) ranks[r].run(allreduce(2, name), [](const Ready&) {});
    for (int step = 0; step < 20; ++step) {
      const auto v = static_cast<float>(step);
      if (r == 0) {
        const float in_a[2] = {v, 1.0F}, in_b[2] = {2.0F * v, 1.0F};
        ranks[r].run(allreduce(2, "a"), body, in_a);
        ranks[r].run(allreduce(2, "b"), body, in_b);
      } else {
        const float in_a[2] = {10.0F * v, 2.0F}, in_b[2] = {20.0F * v, 2.0F};
        const auto h = ranks[r].submit(allreduce(2, "b"), body, nullptr, in_b);
        ranks[r].run(allreduce(2, "a"), body, in_a);
        ranks[r].wait(h);
      }
    }
  });
  CHECK(ranks[0].failure().empty());
  CHECK(ranks[1].failure().empty());
  CHECK(ran == 2 * 2 * 20);
}

TEST_CASE(
    "engine: a small allreduce sent alone from the steady state, unqueued, falls back into the "
    "general round when another rank announces something before it, with the right sums on "
    "every rank",
    "[runtime][engine][cache]") {
  // Rank 0 is idle with the small allreduce cached: each call announces it alone, its input
  // riding in the brief, with no slot built. On odd steps rank 1 has "side" queued before
  // it, so rank 0's round is not the steady state: its collective must be queued as the
  // oldest and the round planned as any other, its body run (the fake net moves no data: the
  // bodies write the sums). On even steps both ranks announce it alone and it is reduced from
  // the briefs into the output, no body run.
  constexpr int kSteps = 10;
  Ranks ranks(2);
  std::atomic<int> bodies{0};
  on_each(2, [&](int r) {
    const std::uint64_t token = Engine::new_token();
    for (int i = 0; i < kSteps; ++i) {
      Engine::Handle side = 0;
      if (r == 1 && i % 2 == 1) side = ranks[r].submit(allreduce(2, "side"), [](const Ready&) {});
      const auto out =
          small_allreduce(ranks[r], static_cast<float>(r + i), 1.0F, hvdrun::ReduceOp::kSum, token,
                          true, [&](const Ready& rd, float* o) {
                            ++bodies;
                            if (rd.inline_data) return;
                            o[0] = static_cast<float>(2 * i + 1);
                            o[1] = 2.0F;
                          });
      EXPECT(out[0] == static_cast<float>(2 * i + 1));
      EXPECT(out[1] == 2.0F);
      if (i % 2 == 1) {
        if (r == 0) ranks[r].run(allreduce(2, "side"), [](const Ready&) {});
        if (r == 1) ranks[r].wait(side);
      }
      EXPECT(ranks[r].pending() == 0);
    }
  });
  CHECK(ranks[0].failure().empty());
  CHECK(ranks[1].failure().empty());
  // Both ranks' bodies ran on the first call (not cached yet) and on every odd step.
  CHECK(bodies == 2 * (1 + kSteps / 2));
}
