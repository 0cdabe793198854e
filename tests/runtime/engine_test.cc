// The collective engine and negotiation without a network: several engines in one
// process (one per simulated rank) whose rounds meet in an in-memory allgather. Checks
// agreement, mismatches, names in any order, duplicate names, join's stand-ins, shutdown,
// fatal failures and stall reports. Runs under ASan and TSan in CI.
#include "runtime/engine/engine.h"

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/engine/negotiation.h"

using hvdrun::DataType;
using hvdrun::runtime::DuplicateName;
using hvdrun::runtime::Engine;
using hvdrun::runtime::Kind;
using hvdrun::runtime::make_request;
using hvdrun::runtime::Ready;
using hvdrun::runtime::Request;
using hvdrun::runtime::StallPolicy;
using hvdrun::runtime::Window;
using namespace std::chrono_literals;

namespace {

// The ranks' rounds meet here: an allgather among threads, with a deadline so a bug
// fails the test instead of hanging it. Like the shared segment, it moves only the
// `used` bytes of each block; the rest of each block arrives as garbage, so a reader
// that looks past what a block says it holds gets it wrong.
class FakeNet {
 public:
  explicit FakeNet(int n) : n_(n), table_(static_cast<std::size_t>(n)) {}

  void exchange(int rank, const void* mine, std::size_t used, void* all, std::size_t bytes) {
    std::unique_lock lock(mu_);
    if (broken_) throw std::runtime_error("transport broken");
    if (used > bytes) throw std::runtime_error("a block's used bytes exceed the block");
    largest_ = std::max(largest_, bytes);
    const long long gen = gen_;
    auto& slot = table_[static_cast<std::size_t>(rank)];
    slot.assign(bytes, static_cast<char>(0xA5));
    std::memcpy(slot.data(), mine, used);
    if (++arrived_ == n_) {
      result_ = table_;
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lock, 20s, [&] { return gen_ != gen || broken_; })) {
      throw std::runtime_error("fake round timed out");
    }
    if (gen_ == gen) throw std::runtime_error("transport broken");
    for (std::size_t r = 0; r < result_.size(); ++r) {
      if (result_[r].size() != bytes) throw std::runtime_error("ranks exchanged different sizes");
      std::memcpy(static_cast<char*>(all) + r * bytes, result_[r].data(), bytes);
    }
    ++exchanges_;
  }

  void fail() {
    std::lock_guard lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

  long long exchanges() {
    std::lock_guard lock(mu_);
    return exchanges_;
  }

  // The largest block a round has moved.
  std::size_t largest() {
    std::lock_guard lock(mu_);
    return largest_;
  }

 private:
  int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<char>> table_, result_;
  int arrived_ = 0;
  long long gen_ = 0, exchanges_ = 0;
  std::size_t largest_ = 0;
  bool broken_ = false;
};

// N engines over one FakeNet; records stand-ins and stall reports.
struct Ranks {
  explicit Ranks(int n, StallPolicy stall = {},
                 std::size_t inline_limit = hvdrun::runtime::kInlineBytes)
      : net(n) {
    for (int r = 0; r < n; ++r) {
      Engine::Hooks h;
      h.inline_limit = inline_limit;
      h.exchange = [this, r](const void* mine, std::size_t used, void* all, std::size_t bytes,
                             const Request*) { net.exchange(r, mine, used, all, bytes); };
      h.stand_in = [this, r](const Ready& rd) {
        std::lock_guard lock(mu);
        stand_ins.push_back(std::to_string(r) + ":" + hvdrun::runtime::label(rd.request));
      };
      h.stall = [this](const std::string& text, bool) {
        std::lock_guard lock(mu);
        stalls.push_back(text);
      };
      engines.push_back(std::make_unique<Engine>(h, n, stall));
    }
  }
  Engine& operator[](int r) { return *engines[static_cast<std::size_t>(r)]; }

  FakeNet net;
  std::mutex mu;
  std::vector<std::string> stand_ins, stalls;
  std::vector<std::unique_ptr<Engine>> engines;
};

Request allreduce(std::size_t count, const char* name = nullptr,
                  DataType dtype = DataType::kFloat32) {
  return make_request(Kind::kAllreduce, count, dtype, name, nullptr, 0, nullptr);
}

// A blocking allreduce of the two floats {x, y} by `op`, with an InlineResult and its input
// offered to the round when `carry`; returns the output. `body`, when the engine calls it,
// fills the output (by default from the round, which must then carry every input).
using SmallBody = std::function<void(const Ready&, float* out)>;
std::array<float, 2> small_allreduce(
    Engine& engine, float x, float y, hvdrun::ReduceOp op, std::uint64_t token, bool carry = true,
    const SmallBody& body = [](const Ready&, float*) {}) {
  float in[2] = {x, y};
  float out[2] = {-1.0F, -1.0F};
  const Engine::InlineResult result{out, 2, DataType::kFloat32, op};
  engine.run(
      allreduce(2),
      [&](const Ready& rd) {
        body(rd, out);
        if (rd.inline_data) hvdrun::runtime::reduce_inline(rd, out, 2, DataType::kFloat32, op);
      },
      carry ? in : nullptr, carry ? &result : nullptr, token);
  return {out[0], out[1]};
}

// Catch2's assertions are not thread-safe: the ranks' threads record what failed with
// EXPECT, and on_each checks the record on the test's own thread.
std::mutex g_expect_mu;
std::vector<std::string> g_expect_failed;
void expect(bool ok, const char* what, int line) {
  if (ok) return;
  std::lock_guard lock(g_expect_mu);
  g_expect_failed.push_back(std::string(what) + " (line " + std::to_string(line) + ")");
}
#define EXPECT(cond) expect(static_cast<bool>(cond), #cond, __LINE__)

// Runs `fn(rank)` on one thread per rank and waits for all (rethrowing the first error).
void on_each(int n, const std::function<void(int)>& fn) {
  {
    std::lock_guard lock(g_expect_mu);
    g_expect_failed.clear();
  }
  std::vector<std::future<void>> done;
  for (int r = 0; r < n; ++r) done.push_back(std::async(std::launch::async, fn, r));
  for (auto& f : done) {
    REQUIRE(f.wait_for(30s) == std::future_status::ready);
    f.get();
  }
  std::lock_guard lock(g_expect_mu);
  for (const auto& f : g_expect_failed) FAIL_CHECK(f);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

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
