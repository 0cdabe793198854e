// libFuzzer target for the Horovod HTTP rendezvous' request handling: the input is a
// byte stream of HTTP requests, parsed with the same Beast parser and limits the server
// uses and answered by handle_horovod_request() against one store, as one keep-alive
// connection would be. Every answer must be one of the statuses the server documents,
// a rejection must explain itself in one line, the store's byte count must match what
// it holds and stay under its cap, and a value just stored must read back unchanged.
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "compat/horovod_http_handler.h"
#include "hostfile/placement.h"

namespace http = boost::beast::http;
namespace compat = hvdrun::compat;

namespace {

/// Small caps so that inputs of a few KiB reach the limits.
constexpr std::size_t kStoreBytes = 4096;
constexpr std::size_t kHeaderBytes = 8u << 10;
constexpr std::size_t kBodyBytes = 16u << 10;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_answer(const compat::HttpAnswer& a) {
  namespace st = compat::http_status;
  check(a.status == st::ok || a.status == st::bad_request || a.status == st::not_found ||
        a.status == st::method_not_allowed || a.status == st::insufficient_storage);
  if (a.status != st::ok && !a.body.empty()) {
    check(a.body.back() == '\n' && a.body.find('\n') == a.body.size() - 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto placement = hvdrun::hostfile::place({{"hostA", 2}, {"hostB", 2}}, 4);
  compat::HorovodStore store(placement, kStoreBytes);
  const char* p = reinterpret_cast<const char*>(data);
  std::size_t left = size;
  // One parser per request, as the server's session does; stop at the first malformed
  // or incomplete request (the server closes the connection there).
  while (left > 0) {
    http::request_parser<http::string_body> parser;
    parser.eager(true);
    parser.header_limit(kHeaderBytes);
    parser.body_limit(kBodyBytes);
    boost::beast::error_code ec;
    while (!parser.is_done() && left > 0) {
      const std::size_t used = parser.put(boost::asio::const_buffer(p, left), ec);
      p += used;
      left -= used;
      if (ec || used == 0) break;
    }
    if (!parser.is_done() && !ec && left == 0) parser.put_eof(ec);
    if (ec || !parser.is_done()) break;

    auto& req = parser.get();
    const auto verb = req.method_string();
    const auto method = compat::parse_http_method(std::string_view(verb.data(), verb.size()));
    const std::string target(req.target().data(), req.target().size());
    const std::string body = req.body();
    auto answer = compat::handle_horovod_request(store, method, target, req.body());
    check_answer(answer);
    check(store.consistent());
    if (method == compat::HttpMethod::put && answer.status == compat::http_status::ok) {
      auto back = compat::handle_horovod_request(store, compat::HttpMethod::get, target, {});
      check(back.status == compat::http_status::ok && back.body == body);
    }
  }
  return 0;
}
