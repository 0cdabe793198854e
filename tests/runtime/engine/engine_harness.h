// The engine's tests without a network (engine_test.cc, engine_round_test.cc): several
// engines in one process (one per simulated rank) whose rounds meet in an in-memory
// allgather, and the helpers their test cases share.
#pragma once

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
#include "runtime/engine/engine.h"
#include "runtime/engine/negotiation.h"

namespace hvdrun::testing {

using hvdrun::DataType;
using hvdrun::runtime::Engine;
using hvdrun::runtime::Kind;
using hvdrun::runtime::make_request;
using hvdrun::runtime::Ready;
using hvdrun::runtime::Request;
using hvdrun::runtime::StallPolicy;
using namespace std::chrono_literals;

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

inline Request allreduce(std::size_t count, const char* name = nullptr,
                         DataType dtype = DataType::kFloat32) {
  return make_request(Kind::kAllreduce, count, dtype, name, nullptr, 0, nullptr);
}

// A blocking allreduce of the two floats {x, y} by `op`, with an InlineResult and its input
// offered to the round when `carry`; returns the output. `body`, when the engine calls it,
// fills the output (by default from the round, which must then carry every input).
using SmallBody = std::function<void(const Ready&, float* out)>;
inline std::array<float, 2> small_allreduce(
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
inline std::mutex g_expect_mu;
inline std::vector<std::string> g_expect_failed;
inline void expect(bool ok, const char* what, int line) {
  if (ok) return;
  std::lock_guard lock(g_expect_mu);
  g_expect_failed.push_back(std::string(what) + " (line " + std::to_string(line) + ")");
}
#define EXPECT(cond) ::hvdrun::testing::expect(static_cast<bool>(cond), #cond, __LINE__)

// Runs `fn(rank)` on one thread per rank and waits for all (rethrowing the first error).
inline void on_each(int n, const std::function<void(int)>& fn) {
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

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace hvdrun::testing
