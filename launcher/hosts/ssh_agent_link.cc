// SshAgentLink: a remote host's agent over one SSH exec channel, driven from the
// launcher's poll loop without blocking.
#include "launcher/hosts/ssh_agent_link.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <utility>

#include "common/deadline.h"
#include "common/error.h"

namespace hvdrun::launcher {
namespace {

constexpr std::size_t kStderrTailLines = 10;

class SshAgentLink : public AgentLink {
 public:
  SshAgentLink(std::string host, std::unique_ptr<ssh::Session> session,
               std::unique_ptr<ssh::Channel> channel)
      : host_(std::move(host)),
        session_(std::move(session)),
        channel_(std::move(channel)),
        launcher_address_(session_->local_address()),
        host_address_(session_->peer_ip()),
        peer_(session_->peer_address()),
        // Always readable: polled while libssh2 may hold data the socket no longer signals.
        ready_(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (!ready_) throw_errno("linking to the agent on host " + host_, "eventfd");
  }

  ~SshAgentLink() override {
    if (channel_) close(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  }

  SshAgentLink(const SshAgentLink&) = delete;
  SshAgentLink& operator=(const SshAgentLink&) = delete;

  void add_pollfds(std::vector<pollfd>& fds, bool want_read, bool want_write) const override {
    if (!channel_) return;
    short events = want_read ? POLLIN : 0;
    short session_events = session_->poll_events();
    // A blocked write may wait for a window adjustment (input) or for the socket (output).
    if (want_write || eof_pending_) events = static_cast<short>(events | session_events);
    events = static_cast<short>(events | (session_events & POLLOUT));
    if (events != 0) fds.push_back({session_->fd(), events, 0});
    if (want_read && pending_) fds.push_back({ready_.get(), POLLIN, 0});
  }

  IoResult read(char* buf, std::size_t size) override {
    if (!channel_) return {IoResult::eof, 0, {}};
    try {
      drain_stderr();
      retry_eof();
      std::ptrdiff_t n = channel_->read(ssh::Stream::out, buf, size);
      if (n > 0) {
        pending_ = true;
        return {IoResult::ok, static_cast<std::size_t>(n), {}};
      }
      pending_ = false;
      if (n == ssh::kWouldBlock) return {IoResult::would_block, 0, {}};
      drain_stderr();
      return {IoResult::eof, 0, {}};
    } catch (const ssh::SessionError& e) {
      pending_ = false;
      return {IoResult::error, 0, broken(e)};
    }
  }

  IoResult write(const char* buf, std::size_t size) override {
    if (!channel_) return {IoResult::error, 0, "write to agent: the connection is closed"};
    try {
      std::ptrdiff_t n = channel_->write(buf, size);
      // libssh2 may have taken the agent's next packets off the socket while it wrote: the
      // socket then shows nothing, and the job, which reads only the links poll reported,
      // would not read them until more came. Read once more to be sure.
      pending_ = true;
      if (n == ssh::kWouldBlock || n == 0) return {IoResult::would_block, 0, {}};
      return {IoResult::ok, static_cast<std::size_t>(n), {}};
    } catch (const ssh::SessionError& e) {
      return {IoResult::error, 0, broken(e)};
    }
  }

  void close_write() override {
    if (!channel_ || eof_sent_) return;
    eof_pending_ = true;
    try {
      retry_eof();
    } catch (const ssh::SessionError& e) {
      broken(e);
      abort();
    }
  }

  void abort() override {
    // Dropping the connection ends the agent's session: sshd closes the agent's stdin
    // and the agent kills its ranks.
    flush_stderr_line();
    channel_.reset();
    session_.reset();
    pending_ = false;
    if (result_.empty()) result_ = "was cut off (hvdrun closed its connection)";
  }

  std::string close(std::chrono::steady_clock::time_point deadline) override {
    if (!channel_) return with_tail(result_);
    try {
      eof_pending_ = !eof_sent_;
      char scratch[16384];
      for (;;) {
        retry_eof();
        drain_stderr();
        // Whatever the agent still says is of no use once the launcher closes it.
        while (channel_->read(ssh::Stream::out, scratch, sizeof scratch) > 0) {
        }
        drain_stderr();
        if (channel_->eof()) {
          if (auto status = channel_->exit_status()) {
            result_ = status->signal.empty() ? "exited with code " + std::to_string(status->code)
                                             : "was killed by SIG" + status->signal;
            break;
          }
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          result_ = "did not exit in time; closed its connection";
          break;
        }
        pollfd pfd{session_->fd(), session_->poll_events(), 0};
        ::poll(&pfd, 1, static_cast<int>(time_left(deadline).count()));
      }
    } catch (const ssh::SessionError& e) {
      result_ = broken(e);
    }
    std::string how = result_;
    abort();
    return with_tail(how);
  }

  std::string describe() const override { return "agent on " + host_ + " over ssh to " + peer_; }
  std::string launcher_address() const override { return launcher_address_; }
  std::string host_address() const override { return host_address_; }

 private:
  // Records a broken connection; returns the message (it names the host).
  std::string broken(const ssh::SessionError& e) {
    std::string what = e.what();
    if (what.find(host_) == std::string::npos) what = "host " + host_ + ": " + what;
    if (result_.empty()) result_ = "lost its connection: " + what;
    return with_tail(what);
  }

  // `how`, with the agent's last stderr lines unless it ended well.
  std::string with_tail(std::string how) const {
    if (tail_.empty() || how.empty() || how == "exited with code 0") return how;
    how += "; its last lines on stderr:";
    for (const auto& line : tail_) how += "\n    " + line;
    return how;
  }

  void retry_eof() {
    if (eof_pending_ && !eof_sent_ && channel_ && channel_->send_eof()) {
      eof_sent_ = true;
      eof_pending_ = false;
    }
  }

  // Relays the agent's own stderr, line by line, tagged with the host.
  void drain_stderr() {
    char buf[4096];
    for (;;) {
      std::ptrdiff_t n = channel_->read(ssh::Stream::err, buf, sizeof buf);
      if (n <= 0) {
        if (n == 0) flush_stderr_line();
        return;
      }
      line_.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = line_.find('\n', start)) != std::string::npos; start = nl + 1) {
        emit_stderr_line(line_.substr(start, nl - start));
      }
      line_.erase(0, start);
      if (line_.size() > 4096) flush_stderr_line();
    }
  }

  void flush_stderr_line() {
    if (!line_.empty()) emit_stderr_line(std::exchange(line_, {}));
  }

  void emit_stderr_line(std::string line) {
    std::string out = "hvdrun: host " + host_ + ": " + line + "\n";
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
    tail_.push_back(std::move(line));
    if (tail_.size() > kStderrTailLines) tail_.pop_front();
  }

  std::string host_;
  std::unique_ptr<ssh::Session> session_;
  std::unique_ptr<ssh::Channel> channel_;
  std::string launcher_address_;
  std::string host_address_;
  std::string peer_;
  UniqueFd ready_;
  bool pending_ = false;
  bool eof_pending_ = false;
  bool eof_sent_ = false;
  std::string line_;
  std::deque<std::string> tail_;
  std::string result_;
};

}  // namespace

std::unique_ptr<AgentLink> make_ssh_agent_link(const std::string& host,
                                               std::unique_ptr<ssh::Session> session,
                                               std::unique_ptr<ssh::Channel> channel) {
  return std::make_unique<SshAgentLink>(host, std::move(session), std::move(channel));
}

}  // namespace hvdrun::launcher
