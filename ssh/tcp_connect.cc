// Name resolution, TCP connect and the SSH banner check for one login, each under the
// login's deadline: a host that never answers costs its deadline and nothing more.
#include "ssh/tcp_connect.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/seconds_text.h"
#include "ssh/libssh2_core.h"

namespace hvdrun::ssh {
namespace {

// --- name resolution under a deadline ---------------------------------------------------

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string text;  // "ip:port"
};

struct Resolution {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
  std::vector<Address> addresses;
};

void collect(addrinfo* res, std::vector<Address>& out) {
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    Address a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    a.text = format_address(ai->ai_addr, true);
    bool dup =
        std::any_of(out.begin(), out.end(), [&](const Address& b) { return b.text == a.text; });
    if (!dup) out.push_back(std::move(a));
  }
}

// getaddrinfo cannot be cancelled, so it runs on its own detached thread and we wait for
// it only until the deadline; a late answer is simply dropped.
std::vector<Address> resolve(const Target& t, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  const std::string port = std::to_string(t.port);
  addrinfo* res = nullptr;
  if (::getaddrinfo(t.hostname.c_str(), port.c_str(), &hints, &res) == 0) {
    std::vector<Address> out;
    collect(res, out);
    ::freeaddrinfo(res);
    return out;
  }
  auto state = std::make_shared<Resolution>();
  std::thread([state, name = t.hostname, port] {
    addrinfo h{};
    h.ai_family = AF_UNSPEC;
    h.ai_socktype = SOCK_STREAM;
    h.ai_flags = AI_NUMERICSERV;
    addrinfo* r = nullptr;
    int rc = ::getaddrinfo(name.c_str(), port.c_str(), &h, &r);
    std::vector<Address> out;
    if (rc == 0) {
      collect(r, out);
      ::freeaddrinfo(r);
    }
    std::lock_guard lock(state->mutex);
    state->rc = rc;
    state->addresses = std::move(out);
    state->done = true;
    state->cv.notify_all();
  }).detach();
  std::unique_lock lock(state->mutex);
  if (!state->cv.wait_until(lock, deadline, [&] { return state->done; })) {
    throw ConnectError(
        Verdict::dns,
        "resolving '" + t.hostname + "' did not finish within " + seconds_text(t.connect_timeout) +
            " s",
        "check the DNS servers in /etc/resolv.conf, or put the address in HostName (ssh_config) or "
        "-H");
  }
  if (state->rc != 0 || state->addresses.empty()) {
    std::string why = state->rc == 0 ? "no addresses" : ::gai_strerror(state->rc);
    std::string fix = "check the spelling in -H/--hostfile";
    if (t.hostname != t.alias) fix += " and the HostName for '" + t.alias + "' in ssh_config";
    fix += ", or use the host's IP address";
    throw ConnectError(Verdict::dns, "'" + t.hostname + "' does not resolve: " + why, fix);
  }
  return std::move(state->addresses);
}

// --- TCP connect ----------------------------------------------------------------------

UniqueFd connect_any(const Target& t, const std::vector<Address>& addresses, Deadline deadline,
                     std::string& connected) {
  std::vector<std::string> errors;
  bool timed_out = false, all_refused = true;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    const Address& a = addresses[i];
    auto attempt_deadline =
        Clock::now() + left_until(deadline) / static_cast<long>(addresses.size() - i);
    UniqueFd fd(::socket(a.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno("ssh " + t.alias + ": creating a socket", "socket");
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.storage), a.length) < 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd pfd{fd.get(), POLLOUT, 0};
        int rc;
        do {
          rc = ::poll(&pfd, 1, static_cast<int>(ms_left(attempt_deadline)));
        } while (rc < 0 && errno == EINTR);
        if (rc == 0) {
          timed_out = true;
          all_refused = false;
          errors.push_back(a.text + ": no answer");
          continue;
        }
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) {
      connected = a.text;
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (err != ECONNREFUSED) all_refused = false;
    errors.push_back(a.text + ": " + std::strerror(err));
  }
  std::string detail;
  for (const auto& e : errors) detail += (detail.empty() ? "" : "; ") + e;
  const std::string address = addresses.empty() ? t.hostname : addresses.front().text;
  if (timed_out) {
    throw ConnectError(
        Verdict::timeout,
        "no TCP answer within " + seconds_text(t.connect_timeout) + " s (" + detail + ")",
        "check that the host is up and no firewall drops port " + std::to_string(t.port) +
            "; raise ConnectTimeout in ssh_config if the network is slow",
        address);
  }
  throw ConnectError(
      Verdict::refused, "cannot connect (" + detail + ")",
      all_refused ? "start sshd on the host, or give the right port (-p, or Port in ssh_config)"
                  : "check the route to the host and that it is up",
      address);
}

}  // namespace

UniqueFd connect_direct(const Target& t, Deadline deadline, std::string& connected) {
  return connect_any(t, resolve(t, deadline), deadline, connected);
}

void expect_banner(const Target& t, int fd, const std::string& address, Deadline deadline) {
  auto fail = [&](Verdict v, const std::string& detail) {
    throw ConnectError(v, detail,
                       "check that port " + std::to_string(t.port) + " on " + t.hostname +
                           " is sshd (-p, or Port in ssh_config)",
                       address);
  };
  pollfd pfd{fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, static_cast<int>(ms_left(deadline)));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    fail(Verdict::not_ssh,
         "accepted TCP but sent no SSH banner within " + seconds_text(t.connect_timeout) + " s");
  }
  char buf[256];
  ssize_t n = ::recv(fd, buf, sizeof buf, MSG_PEEK);
  if (n == 0)
    fail(Verdict::not_ssh,
         "closed the connection without an SSH banner (sshd MaxStartups or a firewall?)");
  if (n < 0) fail(Verdict::refused, std::string("connection failed: ") + std::strerror(errno));
  std::string_view text(buf, static_cast<std::size_t>(n));
  if (std::string_view("SSH-").substr(0, text.size()) == text.substr(0, 4)) return;
  if (text.find("\nSSH-") != std::string_view::npos) return;
  std::string shown(text.substr(0, std::min<std::size_t>(text.find_first_of("\r\n"), 40)));
  for (auto& c : shown) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '.';
  }
  fail(Verdict::not_ssh, "answered '" + shown + "' instead of an SSH banner");
}

}  // namespace hvdrun::ssh
