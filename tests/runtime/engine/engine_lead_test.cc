// A blocking allreduce whose data leads its round (Engine::Lead): its first step carries
// the round's exchange, so the steady state costs no exchange of its own. The fake lead
// exchanges the brief through the in-memory net (engine_harness.h), asks agreed(), and only
// then "moves" the data by writing the sum itself. Runs under ASan and TSan in CI.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/negotiation.h"
#include "tests/runtime/engine/engine_harness.h"

using hvdrun::runtime::Engine;
using hvdrun::runtime::kInlineBytes;
using hvdrun::runtime::kInlineBytesLocal;
using hvdrun::runtime::Ready;
using hvdrun::testing::allreduce;
using hvdrun::testing::error_of;
using hvdrun::testing::on_each;
using hvdrun::testing::Ranks;

namespace {

// What the leads and bodies of one test did, across ranks.
struct Counts {
  std::atomic<int> leads{0};     // leads called
  std::atomic<int> finished{0};  // leads that moved the data
  std::atomic<int> bodies{0};
};

// Rank r's lead over `ranks`' net: exchanges the round's blocks, then writes `sum` to `out`
// when agreed() says so (what a transport's first step and the rest of its data do).
// `fail`: throws after the exchange, as a transport that lost a peer there would.
Engine::Lead fake_lead(Ranks& ranks, int r, Counts& n, float* out, float sum, bool fail = false) {
  return [&ranks, r, &n, out, sum, fail](const void* mine, std::size_t used, void* all,
                                         std::size_t bytes, const std::function<bool()>& agreed) {
    ++n.leads;
    ranks.net.exchange(r, mine, used, all, bytes);
    if (fail) throw std::runtime_error("a peer was lost in the first step");
    if (!agreed()) return false;
    *out = sum;
    ++n.finished;
    return true;
  };
}

}  // namespace

TEST_CASE(
    "engine lead: the steady state's allreduce carries its round in its data, no exchange of "
    "its own and no body",
    "[runtime][engine][lead]") {
  Ranks ranks(2, {}, kInlineBytesLocal);
  Counts n;
  on_each(2, [&](int r) {
    for (int i = 0; i < 10; ++i) {
      float out = -1;
      const auto lead = fake_lead(ranks, r, n, &out, static_cast<float>(i));
      ranks[r].run(
          allreduce(100000, "grad"),
          [&](const Ready&) {
            ++n.bodies;
            out = static_cast<float>(i);
          },
          0, lead);
      EXPECT(out == static_cast<float>(i));
    }
  });
  // The first call is not cached: whole windows, the body. The other nine lead.
  CHECK(n.bodies == 2);
  CHECK(n.leads == 18);
  CHECK(n.finished == 18);
  // One exchange per steady call (the lead's), as when the brief travels alone.
  CHECK(ranks.net.exchanges() == 2 * (2 + 9));
}

TEST_CASE(
    "engine lead: a rank whose data leads meets one that exchanges its brief alone, so the data "
    "does "
    "not go on with the brief and both run the body",
    "[runtime][engine][lead]") {
  Ranks ranks(2, {}, kInlineBytesLocal);
  Counts n;
  on_each(2, [&](int r) {
    for (int i = 0; i < 6; ++i) {
      float out = -1;
      const auto lead = fake_lead(ranks, r, n, &out, 99.0F);
      ranks[r].run(
          allreduce(100000),
          [&](const Ready&) {
            ++n.bodies;
            out = static_cast<float>(i);
          },
          0, r == 0 ? lead : Engine::Lead());
      EXPECT(out == static_cast<float>(i));
    }
  });
  CHECK(n.leads == 5);  // rank 0's cached calls
  CHECK(n.finished == 0);
  CHECK(n.bodies == 12);
  // Still one exchange per steady call: the round is decided from the briefs the lead moved.
  CHECK(ranks.net.exchanges() == 2 * (2 + 5));
}

TEST_CASE(
    "engine lead: a disagreement found in the lead's step fails the collective on every rank, its "
    "data never moved, and the job goes on",
    "[runtime][engine][lead]") {
  Ranks ranks(2, {}, kInlineBytesLocal);
  Counts n;
  on_each(2, [&](int r) {
    float out = -1;
    // Both cached by agreed rounds first (no lead is used for a request not cached yet).
    ranks[r].run(allreduce(20000), [](const Ready&) {});
    ranks[r].run(allreduce(30000), [](const Ready&) {});
    const auto lead = fake_lead(ranks, r, n, &out, 1.0F);
    const auto err = error_of([&] {
      ranks[r].run(
          allreduce(r == 0 ? 20000 : 30000), [&](const Ready&) { ++n.bodies; }, 0, lead);
    });
    EXPECT(err == "hvdrun: allreduce #2: rank 0 has float32[20000], rank 1 has float32[30000]");
    EXPECT(out == -1.0F);
    const auto again = fake_lead(ranks, r, n, &out, 2.0F);
    ranks[r].run(
        allreduce(20000), [&](const Ready&) { ++n.bodies; }, 0, again);
    EXPECT(out == 2.0F);
  });
  CHECK(n.leads == 4);
  CHECK(n.finished == 2);  // the last call's, on each rank
  CHECK(n.bodies == 0);
  CHECK(ranks[0].failure().empty());
  CHECK(ranks[1].failure().empty());
}

TEST_CASE("engine lead: a transport failure in the lead is the collective's error and is fatal",
          "[runtime][engine][lead]") {
  Ranks ranks(2, {}, kInlineBytesLocal);
  Counts n;
  on_each(2, [&](int r) {
    ranks[r].run(allreduce(50000), [](const Ready&) {});
    float out = -1;
    const auto lead = fake_lead(ranks, r, n, &out, 3.0F, r == 0);
    const auto err = error_of([&] {
      ranks[r].run(
          allreduce(50000), [](const Ready&) {}, 0, lead);
    });
    EXPECT(err == (r == 0 ? "a peer was lost in the first step" : ""));
  });
  CHECK(ranks[0].failure() == "a peer was lost in the first step");
  const auto later = error_of([&] { ranks[0].run(allreduce(50000), [](const Ready&) {}); });
  CHECK_THAT(later, Catch::Contains("an earlier collective failed"));
}

TEST_CASE("engine lead: not used where a round's blocks are cut to the cross-host limit",
          "[runtime][engine][lead]") {
  Ranks ranks(2, {}, kInlineBytes);
  Counts n;
  on_each(2, [&](int r) {
    for (int i = 0; i < 3; ++i) {
      float out = -1;
      const auto lead = fake_lead(ranks, r, n, &out, 5.0F);
      ranks[r].run(
          allreduce(100000), [&](const Ready&) { ++n.bodies; }, 0, lead);
    }
  });
  CHECK(n.leads == 0);
  CHECK(n.bodies == 6);
}
