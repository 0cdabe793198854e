// The server's store without a socket: requests answered from it, its byte budget, and
// the waiters it wakes (once, when a key appears; never when a key changes).
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "rendezvous/server.h"
#include "rendezvous/server_store.h"

using namespace hvdrun::rendezvous;

namespace {

Request request(Op op, std::vector<std::string> keys, std::vector<std::string> values = {}) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

// Records the wait ids it is told about.
class RecordingWaiter final : public KeyWaiter {
 public:
  void key_arrived(std::uint64_t wait_id) override { arrived.push_back(wait_id); }
  std::vector<std::uint64_t> arrived;
};

}  // namespace

TEST_CASE("server store: set, get, add and delete answer as the protocol says") {
  ServerStore store(1 << 20);
  auto set = request(Op::kSet, {"k"}, {"v"});
  CHECK(store.apply(set).status == Status::kOk);
  auto get = request(Op::kGet, {"k"});
  Response got = store.apply(get);
  REQUIRE(got.values.size() == 1);
  CHECK(got.values[0] == "v");
  auto absent = request(Op::kGet, {"nothing"});
  CHECK(store.apply(absent).status == Status::kNotFound);
  auto multi = request(Op::kMultiGet, {"k", "nothing"});
  Response both = store.apply(multi);
  REQUIRE(both.values.size() == 2);
  CHECK(both.values[0] == "v");
  CHECK_FALSE(both.values[1]);

  auto add = request(Op::kAdd, {"n"});
  add.delta = 5;
  CHECK(store.apply(add).number == 5);
  add.delta = -2;
  CHECK(store.apply(add).number == 3);
  CHECK(store.get("n") == "3");
  auto add_text = request(Op::kAdd, {"k"});
  add_text.delta = 1;
  Response refused = store.apply(add_text);
  CHECK(refused.status == Status::kBadRequest);
  CHECK_THAT(refused.message, Catch::Contains("not an integer"));

  auto del = request(Op::kDelete, {"k"});
  CHECK(store.apply(del).number == 1);
  CHECK(store.apply(del).number == 0);
  CHECK_FALSE(store.contains("k"));
}

TEST_CASE("server store: the budget counts keys, values and the overhead, and refuses beyond it") {
  const std::size_t one = 1 + 3 + kStoreEntryOverhead;  // key "a", value "xyz"
  ServerStore store(2 * one);
  auto a = request(Op::kSet, {"a"}, {"xyz"});
  CHECK(store.apply(a).status == Status::kOk);
  CHECK(store.bytes() == one);
  auto b = request(Op::kSet, {"b"}, {"xyz"});
  CHECK(store.apply(b).status == Status::kOk);
  CHECK(store.bytes() == 2 * one);
  auto c = request(Op::kMultiSet, {"c", "d"}, {"1", "2"});
  Response full = store.apply(c);
  CHECK(full.status == Status::kBadRequest);
  CHECK_THAT(full.message, Catch::Contains("over its budget of " + std::to_string(2 * one)));
  CHECK_FALSE(store.contains("c"));
  // Rewriting a key with a value of the same size costs nothing more.
  auto again = request(Op::kSet, {"a"}, {"abc"});
  CHECK(store.apply(again).status == Status::kOk);
  auto del = request(Op::kDelete, {"a"});
  store.apply(del);
  CHECK(store.bytes() == one);
}

TEST_CASE("server store: a waiter is told once when its key appears, not when it changes") {
  ServerStore store(1 << 20);
  auto waiter = std::make_shared<RecordingWaiter>();
  store.wait_for("k", waiter, 7);
  auto other = request(Op::kSet, {"other"}, {"1"});
  store.apply(other);
  CHECK(waiter->arrived.empty());
  store.set("k", "1");
  CHECK(waiter->arrived == std::vector<std::uint64_t>{7});
  store.set("k", "2");
  CHECK(waiter->arrived.size() == 1);

  // A multi-set wakes the waiters of each new key; a waiter that is gone is skipped.
  auto gone = std::make_shared<RecordingWaiter>();
  store.wait_for("m1", waiter, 8);
  store.wait_for("m2", gone, 9);
  gone.reset();
  auto multi = request(Op::kMultiSet, {"m1", "m2"}, {"a", "b"});
  CHECK(store.apply(multi).status == Status::kOk);
  CHECK(waiter->arrived == std::vector<std::uint64_t>{7, 8});

  store.wait_for("late", waiter, 10);
  store.clear_waiters();
  store.set("late", "x");
  CHECK(waiter->arrived.size() == 2);
}
