// The request handling of Horovod's HTTP rendezvous as a pure function over a store:
// (method, target, body) in, (status, body) out, no sockets and no Boost. The server
// (horovod_http_server.cc) parses HTTP and calls it; the fuzzer
// (fuzz/horovod_http_fuzz.cc) drives it with arbitrary requests.
//
// Scope semantics: the scopes `global`, `local_<hostname>` and `cross_<local_rank>` have
// sizes known from the placement; `DELETE /<scope>/<rank>` says that rank is done, and
// when every rank of such a scope is done its data is dropped. Any other scope is ad hoc:
// DELETE removes the key named. `rank_and_size` is read-only: the coordinates of each
// `<host>:<local_rank>`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "hostfile/placement.h"

namespace hvdrun::compat {

/// The HTTP methods the rendezvous tells apart.
enum class HttpMethod { get, put, delete_, other };

/// The method named `name` ("GET", "PUT", "DELETE"; anything else is `other`).
HttpMethod parse_http_method(std::string_view name);

/// HTTP status codes the handler answers with.
namespace http_status {
inline constexpr unsigned ok = 200;
inline constexpr unsigned bad_request = 400;
inline constexpr unsigned not_found = 404;
inline constexpr unsigned method_not_allowed = 405;
inline constexpr unsigned insufficient_storage = 507;
}  // namespace http_status

/// What the handler answers: an HTTP status and a body (a stored value, or a one-line
/// explanation ending in a newline for a rejection).
struct HttpAnswer {
  /// HTTP status code.
  unsigned status = http_status::ok;
  /// Response body.
  std::string body;
};

/// What one key, or one scope, costs in the budget beyond the bytes of its name (and
/// value): the map entries that hold it.
inline constexpr std::size_t kHorovodEntryOverhead = 64;

/// Counters of a store, read together.
struct HorovodStoreStats {
  /// Scopes currently holding data.
  std::size_t scopes = 0;
  /// Bytes of the budget held by keys and values: names, values and
  /// kHorovodEntryOverhead per key and per scope.
  std::size_t stored_bytes = 0;
  /// Bytes of the budget reserved for request bodies still arriving.
  std::size_t reserved_bytes = 0;
  /// Sized scopes whose ranks all finished and were cleared.
  std::uint64_t scopes_cleared = 0;
};

/// The key-value store with Horovod's scope semantics. Thread-safe (one mutex).
class HorovodStore {
 public:
  /// Sizes the scopes from `placement` (host names as the user wrote them, which is what
  /// ranks get as HOROVOD_HOSTNAME). `max_bytes` is the one budget for keys, values and
  /// the bodies in flight (reserve()); a PUT beyond it is refused (507).
  HorovodStore(const hostfile::Placement& placement, std::size_t max_bytes);

  /// Reserves `bytes` of the budget for a request body about to be read; false (nothing
  /// reserved) when the budget cannot hold it.
  bool reserve(std::size_t bytes);
  /// Gives back a reservation (before the body it was for is PUT, or when it is dropped).
  void release(std::size_t bytes);

  /// GET: the value, or 404 while absent (ranks poll).
  HttpAnswer get(const std::string& scope, const std::string& key) const;
  /// PUT: stores or replaces the value.
  HttpAnswer put(const std::string& scope, const std::string& key, std::string value);
  /// DELETE: a rank done with a sized scope, or a key dropped from an ad-hoc scope.
  HttpAnswer finish(const std::string& scope, const std::string& key);

  /// The counters, consistent with each other.
  HorovodStoreStats stats() const;
  /// Whether the byte count matches the keys and values held and respects the budget: a
  /// consistency check for tests and the fuzzer (walks the whole store).
  bool consistent() const;

 private:
  struct Scope {
    std::unordered_map<std::string, std::string> values;
    std::set<int> finished;
  };

  const std::size_t max_bytes_;
  std::unordered_map<std::string, int> sizes_;
  std::unordered_map<std::string, std::string> coordinates_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Scope> scopes_;
  std::size_t bytes_ = 0;
  std::size_t reserved_ = 0;
  std::uint64_t cleared_ = 0;
};

/// Answers one request: `target` must be exactly "/<scope>/<key>" with both names
/// non-empty and made of name characters (400 otherwise); GET, PUT and DELETE map to the
/// store, any other method gets 405. `body` is the request body (PUT's value).
HttpAnswer handle_horovod_request(HorovodStore& store, HttpMethod method, std::string_view target,
                                  std::string body);

}  // namespace hvdrun::compat
