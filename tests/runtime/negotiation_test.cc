// plan() and the briefs of the steady state, tested directly on tables (runtime/engine/
// negotiation.h): plan() is a pure function of the windows and the JoinBook, so each case
// builds the windows every rank would put into a round and checks what every rank decides.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/engine/negotiation.h"

using hvdrun::DataType;
using hvdrun::runtime::Brief;
using hvdrun::runtime::JoinBook;
using hvdrun::runtime::Kind;
using hvdrun::runtime::make_request;
using hvdrun::runtime::Plan;
using hvdrun::runtime::Request;
using hvdrun::runtime::RequestCache;
using hvdrun::runtime::Window;

namespace {

Request named(const char* name, std::size_t count = 4) {
  return make_request(Kind::kAllreduce, count, DataType::kFloat32, name, nullptr, 0, nullptr);
}

Request unnamed(std::int64_t seq, std::size_t count = 4) {
  Request r =
      make_request(Kind::kAllreduce, count, DataType::kFloat32, nullptr, nullptr, 0, nullptr);
  r.seq = seq;
  return r;
}

Request control(Kind kind) {
  return make_request(kind, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr);
}

// The windows of one round: rank r announces `per_rank[r]`, in that order.
std::vector<Window> round_of(const std::vector<std::vector<Request>>& per_rank) {
  std::vector<Window> t(per_rank.size());
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (const Request& q : per_rank[r]) t[r].requests[t[r].count++] = q;
  }
  return t;
}

// What a plan decided, as text: "label[absent ranks]" per ready collective, errors after '!'.
std::vector<std::string> decided(const Plan& p) {
  std::vector<std::string> out;
  for (const auto& rd : p.ready) {
    std::string s = hvdrun::runtime::label(rd.request);
    if (!rd.absent.empty()) {
      s += " without";
      for (int a : rd.absent) s += " " + std::to_string(a);
    }
    if (rd.request.kind == Kind::kJoin) s += " last " + std::to_string(rd.last_joined);
    if (!rd.error.empty()) s += " ! " + rd.error;
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("plan: named collectives in different orders run in one order on every rank",
          "[runtime][negotiation]") {
  const auto t = round_of({{named("a"), named("b")}, {named("b"), named("a")}, {named("a")}});
  // Every rank plans the same table with its own book: the same answer everywhere.
  JoinBook mine, theirs;
  const auto first = decided(hvdrun::runtime::plan(t, mine));
  CHECK(first == decided(hvdrun::runtime::plan(t, theirs)));
  // 'a' is everybody's; 'b' waits for rank 2, in the ledger, not in a window again.
  CHECK(first == std::vector<std::string>{"allreduce 'a'"});
  CHECK(decided(hvdrun::runtime::plan(round_of({{}, {}, {}}), mine)).empty());
  CHECK(decided(hvdrun::runtime::plan(round_of({{}, {}, {named("b")}}), mine)) ==
        std::vector<std::string>{"allreduce 'b'"});
  for (const auto& owed : mine.announced) CHECK(owed.empty());  // nothing left owed
}

TEST_CASE("plan: unnamed collectives match by position, whatever round each rank sends them",
          "[runtime][negotiation]") {
  JoinBook book;
  CHECK(decided(hvdrun::runtime::plan(round_of({{unnamed(0), unnamed(1)}, {unnamed(0)}}), book)) ==
        std::vector<std::string>{"allreduce #0"});
  CHECK(decided(hvdrun::runtime::plan(round_of({{}, {unnamed(1), unnamed(2)}}), book)) ==
        std::vector<std::string>{"allreduce #1"});
  // A position filled with another size fails on every rank, and the job goes on.
  const auto p = decided(hvdrun::runtime::plan(round_of({{unnamed(2, 8)}, {}}), book));
  REQUIRE(p.size() == 1);
  CHECK(p[0] == "allreduce #2 ! allreduce #2: rank 0 has float32[8], rank 1 has float32[4]");
}

TEST_CASE("plan: a joined rank stands in, and the join completes when every rank joined",
          "[runtime][negotiation]") {
  JoinBook book;
  CHECK(decided(hvdrun::runtime::plan(round_of({{control(Kind::kJoin)}, {named("x")}}), book)) ==
        std::vector<std::string>{"allreduce 'x' without 0"});
  CHECK(decided(hvdrun::runtime::plan(round_of({{}, {control(Kind::kJoin)}}), book)) ==
        std::vector<std::string>{"join last 1"});
  // The book starts again: the next collective waits for both ranks.
  CHECK(decided(hvdrun::runtime::plan(round_of({{named("y")}, {}}), book)).empty());
}

TEST_CASE("plan: a collective that a rank shut down without can never complete",
          "[runtime][negotiation]") {
  JoinBook book;
  const auto p =
      decided(hvdrun::runtime::plan(round_of({{named("z")}, {control(Kind::kShutdown)}}), book));
  REQUIRE(p.size() == 1);
  CHECK(p[0] ==
        "allreduce 'z' without 1 ! allreduce 'z' can never complete: rank 1 shut down without "
        "submitting it");
}

TEST_CASE("briefs: the steady state decided from briefs is the plan of the whole windows",
          "[runtime][negotiation]") {
  RequestCache cache;
  JoinBook learning;
  const auto first = round_of({{unnamed(0)}, {unnamed(0)}});
  cache.learn(first, hvdrun::runtime::plan(first, learning));
  REQUIRE(cache.size() == 1);

  // The next step submits the same collective at the next position, its input inline.
  auto t = round_of({{unnamed(1)}, {unnamed(1)}});
  const float in[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  for (int r = 0; r < 2; ++r) {
    t[r].inline_bytes = sizeof in[r];
    std::memcpy(t[r].payload, in[r], sizeof in[r]);
  }
  std::vector<Brief> briefs(2);
  for (int r = 0; r < 2; ++r) hvdrun::runtime::brief_of(t[r], cache, briefs[r]);
  CHECK_FALSE(hvdrun::runtime::needs_windows(briefs));
  CHECK(briefs[0].bytes() == 16 + 16 + sizeof in[0]);  // header, one entry, the payload

  JoinBook from_briefs = learning, from_windows = learning, as_mine = learning;
  Plan pb;
  REQUIRE(hvdrun::runtime::plan_briefs(briefs, cache, from_briefs, pb));
  const Plan pw = hvdrun::runtime::plan(t, from_windows);
  CHECK(decided(pb) == decided(pw));
  REQUIRE(pb.ready.size() == 1);
  CHECK(pb.ready[0].inline_data);
  CHECK(pb.ready[0].request.seq == 1);
  CHECK(hvdrun::runtime::agreed_as_mine(briefs, briefs[0], as_mine));
  CHECK(as_mine.round == from_briefs.round);  // each counts the round once

  // The briefs' payloads reduce to what every rank's input adds up to.
  float out[4] = {};
  hvdrun::runtime::reduce_inline(pb.ready[0], out, 4, DataType::kFloat32, hvdrun::ReduceOp::kSum);
  CHECK(std::vector<float>(out, out + 4) == std::vector<float>{11, 22, 33, 44});

  // expand() rebuilds every rank's window from the briefs, request for request.
  std::vector<Window> rebuilt;
  hvdrun::runtime::expand(briefs, cache, rebuilt);
  REQUIRE(rebuilt.size() == 2);
  for (int r = 0; r < 2; ++r) {
    REQUIRE(rebuilt[r].count == 1);
    CHECK(hvdrun::runtime::same_key(rebuilt[r].requests[0], t[r].requests[0]));
    CHECK(rebuilt[r].requests[0].count == t[r].requests[0].count);
  }
}

TEST_CASE("briefs: a request the cache lacks, or ranks at different positions, need windows",
          "[runtime][negotiation]") {
  RequestCache cache;
  JoinBook book;
  const auto first = round_of({{unnamed(0)}, {unnamed(0)}});
  cache.learn(first, hvdrun::runtime::plan(first, book));

  // A size never agreed before: not in the cache, so whole windows follow on every rank.
  std::vector<Brief> briefs(2);
  const auto fresh = round_of({{unnamed(1, 16)}, {unnamed(1, 16)}});
  for (int r = 0; r < 2; ++r) hvdrun::runtime::brief_of(fresh[r], cache, briefs[r]);
  CHECK(hvdrun::runtime::needs_windows(briefs));
  Plan p;
  JoinBook untouched = book;
  CHECK_FALSE(hvdrun::runtime::plan_briefs(briefs, cache, untouched, p));
  CHECK(p.ready.empty());
  CHECK(untouched.round == book.round);

  // Cached, but rank 1 is a step behind: not the steady state, planned from windows.
  const auto skewed = round_of({{unnamed(2)}, {unnamed(1)}});
  for (int r = 0; r < 2; ++r) hvdrun::runtime::brief_of(skewed[r], cache, briefs[r]);
  CHECK_FALSE(hvdrun::runtime::needs_windows(briefs));
  CHECK_FALSE(hvdrun::runtime::agreed_as_mine(briefs, briefs[0], untouched));
  hvdrun::runtime::Alone alone;
  CHECK_FALSE(hvdrun::runtime::agreed_alone(briefs, cache, untouched, alone));
  CHECK(untouched.round == book.round);
}
