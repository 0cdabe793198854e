// A deliberately small blocking HTTP/1.1 client over raw sockets for the compat tests and
// the rendezvous benchmark: it speaks to the server the way Horovod's ranks do (one
// request per connection, Content-Length bodies) and can also send arbitrary bytes, which
// a real HTTP library would refuse to produce.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"

namespace hvdrun::compat::testing {

/// A parsed response. `status` 0 means the server closed without answering.
struct HttpResponse {
  int status = 0;
  std::string body;
  /// The raw header block, for assertions on Content-Length and Connection.
  std::string headers;
  /// True when the server said `Connection: close` or closed after answering.
  bool closed = false;
};

/// One TCP connection to 127.0.0.1:port with a deadline on every call.
class HttpConnection {
 public:
  /// Connects to 127.0.0.1:port, from `source` (an IPv4 loopback address such as
  /// 127.0.0.77) when not empty; throws SystemError on failure.
  HttpConnection(std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5),
                 const std::string& source = {});

  /// Sends `bytes` as they are.
  void send_raw(const std::string& bytes);
  /// Sends one well-formed request (HTTP/1.1, Content-Length always present).
  void send_request(const std::string& method, const std::string& target,
                    const std::string& body = {}, bool keep_alive = true);
  /// Reads one response; status 0 when the peer closed first. Throws on timeout.
  HttpResponse read_response();
  /// True when the server has closed the connection (reads EOF or reset within the
  /// timeout); throws on timeout.
  bool wait_closed();

 private:
  bool fill();

  UniqueFd fd_;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
};

/// One request on a fresh connection, as Horovod's HTTPStore does.
/// `source`, when not empty, is the client's address (see HttpConnection).
HttpResponse http_request(std::uint16_t port, const std::string& method, const std::string& target,
                          const std::string& body = {}, const std::string& source = {});

/// Replays one Horovod gloo rank's rendezvous in `scope` (rank `rank` of `size`): PUT
/// /<scope>/<rank> = `value`, GET-poll every /<scope>/<r> until present (404 meanwhile),
/// then DELETE /<scope>/<rank>. Returns the values read, indexed by rank; throws on any
/// unexpected status or when `deadline` passes.
std::vector<std::string> replay_horovod_scope(std::uint16_t port, const std::string& scope,
                                              int rank, int size, const std::string& value,
                                              std::chrono::steady_clock::time_point deadline,
                                              bool finish = true);

}  // namespace hvdrun::compat::testing
