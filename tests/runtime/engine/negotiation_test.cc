// plan() and the briefs of the steady state, tested directly on tables (runtime/engine/
// negotiation.h): plan() is a pure function of the windows and the JoinBook, and the
// steady-state decision (agreed_steady()) one of the briefs, the cache and the JoinBook, so
// each case builds the windows or briefs every rank would put into a round and checks what
// every rank decides.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/engine/negotiation.h"

using hvdrun::DataType;
using hvdrun::runtime::Brief;
using hvdrun::runtime::BriefEntry;
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

// A cache every rank holds alike, learned from agreed rounds of `ranks` ranks: allreduce
// float32[2] by position (id 0), allreduce 'w' float32[4] (1), broadcast 'b' (2), then join
// and shutdown; and a book sized by one round of those ranks, as plan() sizes it.
struct Learned {
  RequestCache cache;
  JoinBook book;
  explicit Learned(int ranks) {
    const auto n = static_cast<std::size_t>(ranks);
    Request b = make_request(Kind::kBroadcast, 4, DataType::kFloat32, "b", nullptr, 0, nullptr);
    b.root = 0;
    JoinBook learning;
    const auto t = round_of(std::vector<std::vector<Request>>(n, {unnamed(0, 2), named("w"), b}));
    cache.learn(t, hvdrun::runtime::plan(t, learning));
    for (const Kind k : {Kind::kJoin, Kind::kShutdown}) {
      const auto c = round_of(std::vector<std::vector<Request>>(n, {control(k)}));
      cache.learn(c, hvdrun::runtime::plan(c, learning));
    }
    hvdrun::runtime::plan(round_of(std::vector<std::vector<Request>>(n)), book);
  }
  std::uint32_t id(const Request& q) const {
    const std::int64_t i = cache.find(q);
    REQUIRE(i >= 0);
    return static_cast<std::uint32_t>(i);
  }
};

// A brief made by hand: cached request `id` alone at position `seq`, `bytes` of input
// carried in the round, every byte `fill`.
Brief brief_alone(std::uint32_t id, std::int64_t seq, std::uint32_t bytes = 0,
                  unsigned char fill = 0) {
  Brief b;
  b.count = 1;
  BriefEntry e;
  e.id = id;
  e.seq = seq;
  b.set_entry(0, e);
  b.inline_bytes = bytes;
  std::memset(b.payload(), fill, bytes);
  return b;
}

// What every rank decides from `briefs`: from every brief (the rounds drive() runs), and,
// when `vouched` (each brief one cached collective that is neither a join nor a shutdown,
// as the express paths know of their own), from each rank's own brief. Each decision on
// its own copy of `book`, which it counts the round in once when it accepts and leaves alone
// otherwise; a rank that accepts from its own brief decides what the decision from every
// brief decides, and then so does every rank.
struct Verdict {
  bool steady = false;
  std::size_t as_mine = 0;  // ranks that accept from their own brief
};
Verdict verdict(const std::vector<Brief>& briefs, const RequestCache& cache, const JoinBook& book,
                bool vouched = true) {
  Verdict v;
  JoinBook counted = book;
  v.steady = hvdrun::runtime::agreed_steady(briefs, cache, counted);
  CHECK(counted.round == book.round + (v.steady ? 1 : 0));
  for (std::size_t r = 0; vouched && r < briefs.size(); ++r) {
    JoinBook own = book;
    if (!hvdrun::runtime::agreed_steady(briefs, cache, own, &briefs[r])) {
      CHECK(own.round == book.round);
      continue;
    }
    ++v.as_mine;
    CHECK(own.round == book.round + 1);
    CHECK(v.steady);
  }
  CHECK((v.as_mine == 0 || v.as_mine == briefs.size()));
  return v;
}

// The Plan of a steady round, as plan_steady() builds it.
Plan steady_plan(const std::vector<Brief>& briefs, const RequestCache& cache) {
  Plan p;
  hvdrun::runtime::plan_steady(briefs, cache, p);
  return p;
}

// plan() on the windows the briefs rebuild, with a copy of `book`: what the round decides
// when it is not the steady state.
Plan planned(const std::vector<Brief>& briefs, const RequestCache& cache, const JoinBook& book) {
  std::vector<Window> windows;
  hvdrun::runtime::expand(briefs, cache, windows);
  JoinBook copy = book;
  return hvdrun::runtime::plan(windows, copy);
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
  REQUIRE(hvdrun::runtime::agreed_steady(briefs, cache, from_briefs));
  const Plan pb = steady_plan(briefs, cache);
  const Plan pw = hvdrun::runtime::plan(t, from_windows);
  CHECK(decided(pb) == decided(pw));
  REQUIRE(pb.ready.size() == 1);
  CHECK(pb.ready[0].inline_data);
  CHECK(pb.ready[0].request.seq == 1);
  CHECK(hvdrun::runtime::agreed_steady(briefs, cache, as_mine, &briefs[0]));
  CHECK(as_mine.round == from_briefs.round);  // each counts the round once
  CHECK(as_mine.round == from_windows.round);

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
  JoinBook untouched = book;
  CHECK_FALSE(hvdrun::runtime::agreed_steady(briefs, cache, untouched));
  CHECK(untouched.round == book.round);

  // Cached, but rank 1 is a step behind: not the steady state, planned from windows.
  const auto skewed = round_of({{unnamed(2)}, {unnamed(1)}});
  for (int r = 0; r < 2; ++r) hvdrun::runtime::brief_of(skewed[r], cache, briefs[r]);
  CHECK_FALSE(hvdrun::runtime::needs_windows(briefs));
  CHECK_FALSE(hvdrun::runtime::agreed_steady(briefs, cache, untouched, &briefs[0]));
  CHECK_FALSE(hvdrun::runtime::agreed_steady(briefs, cache, untouched));
  CHECK(untouched.round == book.round);
}

TEST_CASE(
    "steady state: a rank accepts it from its own brief only when every brief is the same, and "
    "leaves the rest to the decision from every brief",
    "[runtime][negotiation][cache]") {
  RequestCache cache;
  JoinBook book;
  // One round from whole windows: the request is cached and the book sized.
  const auto t = round_of({{unnamed(0, 2)}, {unnamed(0, 2)}, {unnamed(0, 2)}});
  cache.learn(t, hvdrun::runtime::plan(t, book));
  REQUIRE(cache.find(unnamed(0, 2)) == 0);
  Brief mine = brief_alone(0, 1, 8);
  std::memcpy(mine.payload(), "12345678", 8);
  std::vector<Brief> briefs(3, mine);
  std::memcpy(briefs[2].payload(), "abcdefgh", 8);  // payloads differ: they are the inputs
  const long long before = book.round;
  CHECK(hvdrun::runtime::agreed_steady(briefs, cache, book, &mine));
  CHECK(book.round == before + 1);
  Plan p = steady_plan(briefs, cache);
  REQUIRE(p.ready.size() == 1);
  CHECK(hvdrun::runtime::label(p.ready[0].request) == "allreduce #1");
  CHECK(p.ready[0].inline_data);

  // Another position on one rank: no steady state either way.
  auto other = briefs;
  BriefEntry e = mine.entry(0);
  e.seq = 2;
  other[1].set_entry(0, e);
  CHECK_FALSE(hvdrun::runtime::agreed_steady(other, cache, book, &mine));
  CHECK_FALSE(hvdrun::runtime::agreed_steady(other, cache, book));
  // One rank did not carry its input: refused from this rank's own brief, agreed from every
  // brief without inline data (the engine then runs the bodies). The refusal counted
  // nothing, so the round is counted once (the express path, then the round it goes on to).
  other = briefs;
  other[0].inline_bytes = 0;
  CHECK_FALSE(hvdrun::runtime::agreed_steady(other, cache, book, &mine));
  CHECK(book.round == before + 1);
  REQUIRE(hvdrun::runtime::agreed_steady(other, cache, book));
  CHECK(book.round == before + 2);
  p = steady_plan(other, cache);
  REQUIRE(p.ready.size() == 1);
  CHECK_FALSE(p.ready[0].inline_data);
  // A book not sized by a round yet (plan() sizes it): never the steady state.
  JoinBook fresh;
  CHECK_FALSE(hvdrun::runtime::agreed_steady(briefs, cache, fresh, &mine));
  CHECK_FALSE(hvdrun::runtime::agreed_steady(briefs, cache, fresh));
  CHECK(fresh.round == 0);
  // No brief at all: nothing to agree on.
  CHECK_FALSE(hvdrun::runtime::agreed_steady({}, cache, fresh));
  CHECK(fresh.round == 0);
}

TEST_CASE(
    "steady state: every rank's brief the same cached collective alone is it, and plan() on "
    "the same briefs decides the same",
    "[runtime][negotiation][cache]") {
  for (const int n : {1, 2, 4}) {
    CAPTURE(n);
    const Learned k(n);
    const auto N = static_cast<std::size_t>(n);
    struct Case {
      Request request;
      std::int64_t seq;     // its position (-1: named)
      std::uint32_t bytes;  // carried by every rank
      bool inline_all;
    };
    Request b = make_request(Kind::kBroadcast, 4, DataType::kFloat32, "b", nullptr, 0, nullptr);
    b.root = 0;
    for (const Case& c : {Case{unnamed(0, 2), 5, 8, true}, Case{unnamed(0, 2), 5, 0, false},
                          Case{named("w"), -1, 16, true}, Case{b, -1, 0, false}}) {
      CAPTURE(hvdrun::runtime::label(c.request), c.bytes);
      std::vector<Brief> briefs;
      for (std::size_t r = 0; r < N; ++r)  // each rank its own input
        briefs.push_back(
            brief_alone(k.id(c.request), c.seq, c.bytes, static_cast<unsigned char>(r)));
      const Verdict v = verdict(briefs, k.cache, k.book);
      REQUIRE(v.steady);
      CHECK(v.as_mine == N);

      // Its Plan is what plan() decides on the windows the same briefs rebuild.
      const Plan steady = steady_plan(briefs, k.cache);
      const Plan whole = planned(briefs, k.cache, k.book);
      CHECK(decided(steady) == decided(whole));
      REQUIRE(steady.ready.size() == 1);
      REQUIRE(whole.ready.size() == 1);
      CHECK(k.cache.find(steady.ready[0].request) == k.id(c.request));
      CHECK(steady.ready[0].request.seq == c.seq);
      CHECK(steady.ready[0].request.seq == whole.ready[0].request.seq);
      CHECK(steady.ready[0].inline_data == c.inline_all);
      CHECK(whole.ready[0].inline_data == c.inline_all);
      // What a rank that decided from its own brief expects: its input carried, inline data.
      CHECK(steady.ready[0].inline_data == (c.bytes > 0));
      if (c.inline_all) {
        CHECK(steady.ready[0].inline_base == briefs[0].payload());
        CHECK(steady.ready[0].inline_stride == sizeof(Brief));
        CHECK(steady.ready[0].ranks == n);
      }
    }
  }
}

TEST_CASE(
    "steady state: one rank announcing anything else is not it, and plan() on the briefs says "
    "what the round does instead",
    "[runtime][negotiation][cache]") {
  const Learned k(3);
  const std::uint32_t id = k.id(unnamed(0, 2));
  const std::vector<Brief> steady(3, brief_alone(id, 5, 8));
  REQUIRE(verdict(steady, k.cache, k.book).steady);
  struct Case {
    const char* what;
    Brief brief;                     // what the odd rank announces instead
    bool windows;                    // the round needs whole windows
    std::vector<std::string> plans;  // else plan() on the windows the briefs rebuild
  };
  Brief two = brief_alone(id, 5);
  two.count = 2;
  BriefEntry w;
  w.id = k.id(named("w"));
  two.set_entry(1, w);
  Brief uncached = brief_alone(0, 0);
  uncached.set_entry(0, BriefEntry{});
  uncached.uncached = 1;
  Brief none;
  const std::vector<Case> cases = {
      {"another position", brief_alone(id, 6, 8), false, {}},
      {"another collective", brief_alone(k.id(named("w")), -1, 16), false, {}},
      {"two collectives", two, false, {"allreduce #5"}},
      {"nothing", none, false, {}},
      {"a request the cache lacks", uncached, true, {}},
  };
  for (const Case& c : cases) {
    for (const std::size_t odd : {std::size_t{0}, std::size_t{2}}) {  // the first brief or not
      CAPTURE(c.what, odd);
      auto briefs = steady;
      briefs[odd] = c.brief;
      const Verdict v = verdict(briefs, k.cache, k.book);
      CHECK_FALSE(v.steady);
      CHECK(v.as_mine == 0);
      CHECK(hvdrun::runtime::needs_windows(briefs) == c.windows);
      if (!c.windows) CHECK(decided(planned(briefs, k.cache, k.book)) == c.plans);
    }
  }
  // An id past the cache (another build of the library): not the steady state, and the
  // windows cannot be rebuilt.
  auto briefs = steady;
  briefs[1] = brief_alone(static_cast<std::uint32_t>(k.cache.size()), 5, 8);
  CHECK_FALSE(verdict(briefs, k.cache, k.book).steady);
  briefs[0] = briefs[1];
  briefs[2] = briefs[1];
  CHECK_FALSE(verdict(briefs, k.cache, k.book, false).steady);
  std::vector<Window> windows;
  CHECK_THROWS_AS(hvdrun::runtime::expand(briefs, k.cache, windows), hvdrun::Error);
}

TEST_CASE("steady state: never a join or a shutdown, which plan() decides on the briefs",
          "[runtime][negotiation][cache]") {
  const Learned k(2);
  const std::uint32_t join = k.id(control(Kind::kJoin));
  const std::uint32_t leave = k.id(control(Kind::kShutdown));
  const std::uint32_t id = k.id(unnamed(0, 2));
  // Every rank joined, or every rank leaves: no express path vouches for these.
  std::vector<Brief> briefs(2, brief_alone(join, -1));
  CHECK_FALSE(verdict(briefs, k.cache, k.book, false).steady);
  CHECK(decided(planned(briefs, k.cache, k.book)) == std::vector<std::string>{"join last 1"});
  briefs.assign(2, brief_alone(leave, -1));
  CHECK_FALSE(verdict(briefs, k.cache, k.book, false).steady);
  CHECK(decided(planned(briefs, k.cache, k.book)) == std::vector<std::string>{"shutdown"});
  // One rank joined, the other allreduces: the joined rank stands in, through plan(). (The
  // allreduce's rank may take the express path: its own brief is not every rank's.)
  briefs = {brief_alone(join, -1), brief_alone(id, 0)};
  CHECK_FALSE(verdict(briefs, k.cache, k.book).steady);
  CHECK(decided(planned(briefs, k.cache, k.book)) ==
        std::vector<std::string>{"allreduce #0 without 0"});
  // The other way round, the allreduce's brief first: the same.
  briefs = {brief_alone(id, 0), brief_alone(join, -1)};
  CHECK_FALSE(verdict(briefs, k.cache, k.book).steady);
  CHECK(decided(planned(briefs, k.cache, k.book)) ==
        std::vector<std::string>{"allreduce #0 without 1"});
}

TEST_CASE(
    "steady state: from its own brief a rank compares header and entry byte for byte, the "
    "decision from every brief their fields",
    "[runtime][negotiation][cache]") {
  const Learned k(2);
  const std::uint32_t id = k.id(unnamed(0, 2));
  const std::vector<Brief> steady = {brief_alone(id, 3, 8, 1), brief_alone(id, 3, 8, 2)};
  const Verdict v = verdict(steady, k.cache, k.book);
  REQUIRE(v.steady);
  CHECK(v.as_mine == 2);  // the payloads differ: they are the inputs

  // What the decision from every brief reads alike, but the bytes differ: refused from any
  // rank's own brief, the steady state from every brief, and, where one rank's input is
  // not in the round as the collective's bytes, without inline data (plan() on the briefs
  // agrees).
  struct Case {
    const char* what;
    void (*odd)(Brief&);
    bool inline_all;
  };
  const Case cases[] = {
      {"no input carried", [](Brief& b) { b.inline_bytes = 0; }, false},
      {"half its input carried", [](Brief& b) { b.inline_bytes = 4; }, false},
      // A rank whose data led the round meets one that exchanged its brief alone: the data
      // does not go on with the brief (from its own brief), the round is still steady.
      {"one rank's data led the round", [](Brief& b) { b.led = 1; }, true},
      {"the entry's reserved word set",
       [](Brief& b) {
         BriefEntry e = b.entry(0);
         e.reserved = 1;
         b.set_entry(0, e);
       },
       true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto briefs = steady;
    c.odd(briefs[1]);
    const Verdict odd = verdict(briefs, k.cache, k.book);
    CHECK(odd.steady);
    CHECK(odd.as_mine == 0);
    const Plan p = steady_plan(briefs, k.cache);
    const Plan whole = planned(briefs, k.cache, k.book);
    CHECK(decided(p) == decided(whole));
    REQUIRE(p.ready.size() == 1);
    REQUIRE(whole.ready.size() == 1);
    CHECK(p.ready[0].inline_data == c.inline_all);
    CHECK(whole.ready[0].inline_data == c.inline_all);
  }
}
