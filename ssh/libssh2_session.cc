// libssh2-backed Connector, Session and Channel. Every libssh2 call runs in non-blocking
// mode and is retried after poll() on the directions libssh2 reports, until a deadline;
// nothing here can hang on a silent peer. A login's phases live beside it: the TCP side in
// ssh/tcp_connect, ProxyJump in ssh/proxy_jump, the host-key policy in
// ssh/host_key_policy, authentication in ssh/libssh2_auth.
#include "ssh/libssh2_session.h"

#include <libssh2.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <mutex>

#include "common/fd.h"
#include "ssh/host_key_policy.h"
#include "ssh/known_hosts.h"
#include "ssh/libssh2_auth.h"
#include "ssh/libssh2_core.h"
#include "ssh/proxy_jump.h"
#include "ssh/tcp_connect.h"

namespace hvdrun::ssh {
namespace {

using std::chrono::milliseconds;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { libssh2_init(0); });
}

class Libssh2Channel : public Channel {
 public:
  Libssh2Channel(std::shared_ptr<Core> core, LIBSSH2_CHANNEL* channel)
      : core_(std::move(core)), channel_(channel) {}
  Libssh2Channel(const Libssh2Channel&) = delete;
  Libssh2Channel& operator=(const Libssh2Channel&) = delete;
  ~Libssh2Channel() override {
    // One non-blocking attempt: a channel whose peer has already closed (the normal case,
    // after exit_status()) is freed at once; otherwise libssh2 keeps it on the session's
    // list and the session's teardown finishes it, so a dead peer never stalls us here.
    libssh2_channel_free(channel_);
  }

  std::ptrdiff_t read(Stream stream, char* buf, std::size_t size) override {
    auto n = libssh2_channel_read_ex(channel_, stream == Stream::err ? SSH_EXTENDED_DATA_STDERR : 0,
                                     buf, size);
    if (n == LIBSSH2_ERROR_EAGAIN) return kWouldBlock;
    if (n < 0) throw SessionError(core_->label + ": reading remote output: " + core_->last_error());
    return n;
  }

  std::ptrdiff_t write(const char* data, std::size_t size) override {
    auto n = libssh2_channel_write_ex(channel_, 0, data, size);
    if (n == LIBSSH2_ERROR_EAGAIN) return kWouldBlock;
    if (n < 0)
      throw SessionError(core_->label + ": writing to remote stdin: " + core_->last_error());
    return n;
  }

  bool send_eof() override {
    int rc = libssh2_channel_send_eof(channel_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc < 0) throw SessionError(core_->label + ": closing remote stdin: " + core_->last_error());
    return true;
  }

  bool eof() override { return libssh2_channel_eof(channel_) == 1; }

  std::optional<ExitStatus> exit_status() override {
    if (status_) return status_;
    if (!eof()) return std::nullopt;
    if (!close_sent_) {
      int rc = libssh2_channel_close(channel_);
      if (rc == LIBSSH2_ERROR_EAGAIN) return std::nullopt;
      if (rc < 0)
        throw SessionError(core_->label + ": closing the channel: " + core_->last_error());
      close_sent_ = true;
    }
    int rc = libssh2_channel_wait_closed(channel_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return std::nullopt;
    if (rc < 0)
      throw SessionError(core_->label + ": waiting for the exit status: " + core_->last_error());
    ExitStatus status;
    status.code = libssh2_channel_get_exit_status(channel_);
    char* signal = nullptr;
    std::size_t signal_len = 0;
    if (libssh2_channel_get_exit_signal(channel_, &signal, &signal_len, nullptr, nullptr, nullptr,
                                        nullptr) == 0 &&
        signal != nullptr) {
      status.signal.assign(signal, signal_len);
      libssh2_free(core_->session, signal);
    }
    status_ = status;
    return status_;
  }

 private:
  std::shared_ptr<Core> core_;
  LIBSSH2_CHANNEL* channel_;
  bool close_sent_ = false;
  std::optional<ExitStatus> status_;
};

class Libssh2Session : public Session {
 public:
  Libssh2Session(std::shared_ptr<Core> core, Target target)
      : core_(std::move(core)), target_(std::move(target)) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(core_->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      local_ = format_address(reinterpret_cast<sockaddr*>(&ss), false);
    }
    len = sizeof ss;
    if (::getpeername(core_->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      peer_ = format_address(reinterpret_cast<sockaddr*>(&ss), true);
      peer_ip_ = format_address(reinterpret_cast<sockaddr*>(&ss), false);
    }
  }

  /// Behind a ProxyJump the socket is one end of a socketpair: the addresses that matter
  /// are this machine's toward the (last) jump host and the target's as written.
  void set_jumped(std::string local, std::string peer, std::string peer_ip) {
    local_ = std::move(local);
    peer_ = std::move(peer);
    peer_ip_ = std::move(peer_ip);
  }
  std::shared_ptr<Core> core() const { return core_; }

  const Target& target() const override { return target_; }
  int fd() const override { return core_->fd.get(); }
  short poll_events() const override { return core_->events(); }
  std::string local_address() const override { return local_; }
  std::string peer_address() const override { return peer_; }
  std::string peer_ip() const override { return peer_ip_; }
  std::string note() const override { return note_; }
  void set_note(std::string note) { note_ = std::move(note); }

  std::unique_ptr<Channel> exec(const std::string& command, Deadline deadline) override {
    LIBSSH2_CHANNEL* channel = nullptr;
    for (;;) {
      channel = libssh2_channel_open_session(core_->session);
      if (channel != nullptr) break;
      if (libssh2_session_last_errno(core_->session) != LIBSSH2_ERROR_EAGAIN) {
        throw SessionError(core_->label + ": opening a channel: " + core_->last_error());
      }
      if (!core_->wait(deadline))
        throw SessionError(core_->label + ": opening a channel timed out");
    }
    auto result = std::make_unique<Libssh2Channel>(core_, channel);
    int rc = core_->call(deadline, [&] {
      return libssh2_channel_process_startup(channel, "exec", 4, command.data(),
                                             static_cast<unsigned>(command.size()));
    });
    if (rc == LIBSSH2_ERROR_TIMEOUT)
      throw SessionError(core_->label + ": starting `" + command + "` timed out");
    if (rc < 0)
      throw SessionError(core_->label + ": starting `" + command + "`: " + core_->last_error());
    return result;
  }

  int keepalive(int interval_s) override {
    if (interval_s != core_->keepalive_interval) {
      libssh2_keepalive_config(core_->session, 1, static_cast<unsigned>(std::max(interval_s, 0)));
      core_->keepalive_interval = interval_s;
    }
    if (interval_s <= 0) return 0;
    int next = 0;
    int rc = libssh2_keepalive_send(core_->session, &next);
    if (rc < 0 && rc != LIBSSH2_ERROR_EAGAIN) {
      throw SessionError(core_->label + ": sending a keepalive: " + core_->last_error());
    }
    return next;
  }

 private:
  std::shared_ptr<Core> core_;
  Target target_;
  std::string local_;
  std::string peer_;
  std::string peer_ip_;
  std::string note_;
};

}  // namespace

std::shared_ptr<Core> core_of(Session& session) {
  return static_cast<Libssh2Session&>(session).core();
}

std::unique_ptr<Session> Libssh2Connector::connect(const Target& t, Deadline deadline) {
  if (!t.proxy.empty()) {
    // Connecting directly instead would fail later as dns or timeout, with no hint why.
    const std::string keyword = t.proxy.substr(0, t.proxy.find(' '));
    throw ConnectError(
        Verdict::unsupported,
        keyword + " is not supported (ssh_config has '" + t.proxy + "' for " + t.alias + ")",
        "run hvdrun on a machine that reaches the host directly (a login node or "
        "the bastion itself): its ranks must also reach hvdrun's rendezvous port",
        t.hostname + ":" + std::to_string(t.port));
  }
  global_init();
  const auto start = Clock::now();
  auto ms = [&start] {
    return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  };
  const Deadline connect_deadline = std::min(deadline, Clock::now() + t.connect_timeout);
  std::string address;
  std::string jump_local;
  std::shared_ptr<void> tunnel;
  UniqueFd fd;
  if (t.jump) {
    fd = connect_through(*this, t, connect_deadline, tunnel, address, jump_local);
  } else {
    fd = connect_direct(t, connect_deadline, address);
  }
  spdlog::debug("ssh {}: TCP connected to {} after {} ms", t.alias, address, ms());
  expect_banner(t, fd.get(), address, connect_deadline);
  spdlog::debug("ssh {}: banner after {} ms", t.alias, ms());

  auto core = std::make_shared<Core>();
  core->label = "ssh " + t.alias + " (" + address + ")";
  core->session = libssh2_session_init();
  if (core->session == nullptr) throw LaunchError(core->label + ": libssh2_session_init failed");
  core->fd = std::move(fd);
  core->tunnel = std::move(tunnel);
  libssh2_session_set_blocking(core->session, 0);
  const std::string hostkeys =
      hostkey_preference(core->session, known_key_types(t.known_hosts_file, t.hostname, t.port));
  if (!hostkeys.empty()) {
    libssh2_session_method_pref(core->session, LIBSSH2_METHOD_HOSTKEY, hostkeys.c_str());
  }

  int rc = core->call(deadline,
                      [&] { return libssh2_session_handshake(core->session, core->fd.get()); });
  if (rc != 0) {
    if (rc == LIBSSH2_ERROR_TIMEOUT) {
      throw ConnectError(Verdict::timeout, "SSH key exchange did not finish before the deadline",
                         "check the load on the host; raise --start-timeout", address);
    }
    throw ConnectError(Verdict::not_ssh, "SSH handshake failed: " + core->last_error(),
                       "check that the server speaks SSH-2 with algorithms libssh2 supports",
                       address);
  }
  spdlog::debug("ssh {}: key exchange done after {} ms", t.alias, ms());
  std::string note = check_host_key(t, *core, address);
  authenticate(t, *core, deadline, address);
  spdlog::debug("ssh {}: logged in as {} after {} ms", t.alias, t.user, ms());
  auto session = std::make_unique<Libssh2Session>(std::move(core), t);
  if (t.jump) session->set_jumped(jump_local, address, t.hostname);
  session->set_note(std::move(note));
  return session;
}

}  // namespace hvdrun::ssh
