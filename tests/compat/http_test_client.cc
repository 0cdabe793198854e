// Raw-socket HTTP client for the compat tests and benchmark; see http_test_client.h.
#include "tests/compat/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <thread>

#include "common/error.h"

namespace hvdrun::compat::testing {

HttpConnection::HttpConnection(std::uint16_t port, std::chrono::milliseconds timeout,
                               const std::string& source)
    : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), timeout_(timeout) {
  if (!fd_) throw_errno("test client", "socket");
  if (!source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    if (::inet_pton(AF_INET, source.c_str(), &from.sin_addr) != 1)
      throw std::invalid_argument("test client: bad source address " + source);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) < 0)
      throw_errno("test client binding to " + source, "bind");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    throw_errno("test client connecting to 127.0.0.1:" + std::to_string(port), "connect");
  }
  int one = 1;
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void HttpConnection::send_raw(const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("test client", "send");
    }
    off += static_cast<std::size_t>(n);
  }
}

void HttpConnection::send_request(const std::string& method, const std::string& target,
                                  const std::string& body, bool keep_alive) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  if (!keep_alive) req += "Connection: close\r\n";
  req += "\r\n";
  req += body;
  send_raw(req);
}

bool HttpConnection::fill() {
  pollfd p{fd_.get(), POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(timeout_.count()));
  if (rc == 0) throw std::runtime_error("test client: no answer within timeout");
  if (rc < 0) throw_errno("test client", "poll");
  char buf[65536];
  ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
  if (n < 0) {
    if (errno == ECONNRESET) return false;
    throw_errno("test client", "recv");
  }
  if (n == 0) return false;
  buffer_.append(buf, static_cast<std::size_t>(n));
  return true;
}

HttpResponse HttpConnection::read_response() {
  HttpResponse r;
  std::size_t end;
  while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill()) {
      r.closed = true;
      return r;
    }
  }
  r.headers = buffer_.substr(0, end + 2);
  buffer_.erase(0, end + 4);
  // "HTTP/1.1 200 OK"
  auto sp = r.headers.find(' ');
  r.status = std::stoi(r.headers.substr(sp + 1, 3));
  std::size_t length = 0;
  auto cl = r.headers.find("Content-Length: ");
  if (cl != std::string::npos) length = std::stoul(r.headers.substr(cl + 16));
  while (buffer_.size() < length) {
    if (!fill()) throw std::runtime_error("test client: body cut short");
  }
  r.body = buffer_.substr(0, length);
  buffer_.erase(0, length);
  r.closed = r.headers.find("Connection: close") != std::string::npos;
  return r;
}

bool HttpConnection::wait_closed() {
  buffer_.clear();
  while (fill()) buffer_.clear();
  return true;
}

HttpResponse http_request(std::uint16_t port, const std::string& method, const std::string& target,
                          const std::string& body, const std::string& source) {
  HttpConnection c(port, std::chrono::seconds(5), source);
  c.send_request(method, target, body, /*keep_alive=*/false);
  return c.read_response();
}

std::vector<std::string> replay_horovod_scope(std::uint16_t port, const std::string& scope,
                                              int rank, int size, const std::string& value,
                                              std::chrono::steady_clock::time_point deadline,
                                              bool finish) {
  const std::string prefix = "/" + scope + "/";
  auto put = http_request(port, "PUT", prefix + std::to_string(rank), value);
  if (put.status != 200) {
    throw std::runtime_error("PUT " + prefix + std::to_string(rank) + " -> " +
                             std::to_string(put.status));
  }
  std::vector<std::string> values(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    for (;;) {
      auto got = http_request(port, "GET", prefix + std::to_string(r));
      if (got.status == 200) {
        values[static_cast<std::size_t>(r)] = got.body;
        break;
      }
      if (got.status != 404) {
        throw std::runtime_error("GET " + prefix + std::to_string(r) + " -> " +
                                 std::to_string(got.status));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("GET " + prefix + std::to_string(r) + " still 404 at deadline");
      }
      // Horovod's HTTPStore polls every 10 ms.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (finish) {
    auto del = http_request(port, "DELETE", prefix + std::to_string(rank));
    if (del.status != 200) {
      throw std::runtime_error("DELETE " + prefix + std::to_string(rank) + " -> " +
                               std::to_string(del.status));
    }
  }
  return values;
}

}  // namespace hvdrun::compat::testing
