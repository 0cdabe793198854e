// handle_horovod_request() without sockets: the answers the server sends for each kind
// of request, and the store's accounting as scopes fill and clear.
#include <catch2/catch.hpp>
#include <string>

#include "compat/horovod_http_handler.h"
#include "hostfile/placement.h"

namespace hvdrun::compat {
namespace {

hostfile::Placement two_by_two() { return hostfile::place({{"hostA", 2}, {"hostB", 2}}, 4); }

}  // namespace

TEST_CASE("handler: PUT then GET returns the value, GET of an absent key is 404") {
  HorovodStore store(two_by_two(), 1024);
  CHECK(handle_horovod_request(store, HttpMethod::get, "/global/0", {}).status == 404);
  CHECK(handle_horovod_request(store, HttpMethod::put, "/global/0", "addr0").status == 200);
  auto got = handle_horovod_request(store, HttpMethod::get, "/global/0", {});
  CHECK(got.status == 200);
  CHECK(got.body == "addr0");
  // Names, value and the map entries: ("global" + 64) + ("0" + "addr0" + 64).
  CHECK(store.stats().stored_bytes == 6 + 64 + 1 + 5 + 64);
  CHECK(store.consistent());
}

TEST_CASE("handler: a sized scope clears once each of its ranks has sent DELETE") {
  HorovodStore store(two_by_two(), 1024);
  REQUIRE(handle_horovod_request(store, HttpMethod::put, "/local_hostA/0", "a").status == 200);
  REQUIRE(handle_horovod_request(store, HttpMethod::put, "/local_hostA/1", "bb").status == 200);
  CHECK(handle_horovod_request(store, HttpMethod::delete_, "/local_hostA/0", {}).status == 200);
  CHECK(handle_horovod_request(store, HttpMethod::delete_, "/local_hostA/0", {}).status == 200);
  CHECK(store.stats().scopes == 1);
  CHECK(handle_horovod_request(store, HttpMethod::delete_, "/local_hostA/1", {}).status == 200);
  const auto stats = store.stats();
  CHECK(stats.scopes == 0);
  CHECK(stats.stored_bytes == 0);
  CHECK(stats.scopes_cleared == 1);
  auto bad = handle_horovod_request(store, HttpMethod::delete_, "/local_hostA/2", {});
  CHECK(bad.status == 400);
  CHECK(bad.body == "DELETE /local_hostA/<rank> needs a rank below 2\n");
}

TEST_CASE("handler: rank_and_size is read-only and gives each slot's coordinates") {
  HorovodStore store(two_by_two(), 1024);
  auto got = handle_horovod_request(store, HttpMethod::get, "/rank_and_size/hostB:1", {});
  CHECK(got.status == 200);
  CHECK(got.body == "3,4,1,2,1,2");
  CHECK(handle_horovod_request(store, HttpMethod::put, "/rank_and_size/hostB:1", "x").status ==
        405);
}

TEST_CASE("handler: bad targets are 400, other methods 405, a full store 507") {
  // Room for one scope "s" with one key "k" of 8 bytes, counting names and entries.
  const std::size_t budget = (1 + kHorovodEntryOverhead) + (1 + 8 + kHorovodEntryOverhead);
  HorovodStore store(two_by_two(), budget);
  for (const char* target :
       {"", "/", "/global", "/global/", "//0", "/../0", "/g/a b", "global/0"}) {
    INFO(target);
    CHECK(handle_horovod_request(store, HttpMethod::get, target, {}).status == 400);
  }
  CHECK(handle_horovod_request(store, HttpMethod::other, "/global/0", {}).status == 405);
  CHECK(handle_horovod_request(store, HttpMethod::put, "/s/k", "12345678").status == 200);
  auto full = handle_horovod_request(store, HttpMethod::put, "/s/k2", "9");
  CHECK(full.status == 507);
  CHECK(store.stats().stored_bytes == budget);
  CHECK(store.consistent());
  // Keys count too: a long key that would fit as a value alone is refused.
  CHECK(handle_horovod_request(store, HttpMethod::delete_, "/s/k", {}).status == 200);
  CHECK(store.stats().stored_bytes == 0);
  CHECK(handle_horovod_request(store, HttpMethod::put, "/s/" + std::string(10, 'k'), "1").status ==
        507);
  // Bodies in flight draw on the same budget.
  CHECK(store.reserve(budget));
  CHECK(handle_horovod_request(store, HttpMethod::put, "/s/k", "1").status == 507);
  CHECK_FALSE(store.reserve(1));
  store.release(budget);
  CHECK(handle_horovod_request(store, HttpMethod::put, "/s/k", "1").status == 200);
  CHECK(parse_http_method("DELETE") == HttpMethod::delete_);
  CHECK(parse_http_method("delete") == HttpMethod::other);
}

}  // namespace hvdrun::compat
