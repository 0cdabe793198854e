// Scripted SSH layer for unit tests (see fake_ssh.h).
#include "tests/support/fake_ssh.h"

#include <thread>

namespace hvdrun::testing {
namespace {

class FakeChannel : public ssh::Channel {
 public:
  explicit FakeChannel(ssh::CommandResult result) : result_(std::move(result)) {}
  std::ptrdiff_t read(ssh::Stream stream, char* buf, std::size_t size) override {
    std::string& text = stream == ssh::Stream::out ? result_.out : result_.err;
    std::size_t& pos = stream == ssh::Stream::out ? out_pos_ : err_pos_;
    std::size_t n = std::min(size, text.size() - pos);
    std::copy_n(text.data() + pos, n, buf);
    pos += n;
    return static_cast<std::ptrdiff_t>(n);
  }
  std::ptrdiff_t write(const char*, std::size_t size) override {
    return static_cast<std::ptrdiff_t>(size);
  }
  bool send_eof() override { return true; }
  bool eof() override { return out_pos_ == result_.out.size() && err_pos_ == result_.err.size(); }
  std::optional<ssh::ExitStatus> exit_status() override {
    if (!eof()) return std::nullopt;
    return result_.status;
  }

 private:
  ssh::CommandResult result_;
  std::size_t out_pos_ = 0;
  std::size_t err_pos_ = 0;
};

class FakeSession : public ssh::Session {
 public:
  FakeSession(ssh::Target target, FakeHost host, std::shared_ptr<std::vector<std::string>> log,
              std::mutex* mutex)
      : target_(std::move(target)), host_(std::move(host)), log_(std::move(log)), mutex_(mutex) {}
  const ssh::Target& target() const override { return target_; }
  int fd() const override { return -1; }
  short poll_events() const override { return 0; }
  std::string local_address() const override { return "127.0.0.1"; }
  std::string peer_address() const override {
    return target_.hostname + ":" + std::to_string(target_.port);
  }
  std::string peer_ip() const override { return target_.hostname; }
  std::unique_ptr<ssh::Channel> exec(const std::string& command, ssh::Deadline) override {
    {
      std::lock_guard lock(*mutex_);
      log_->push_back(target_.alias + ": " + command);
    }
    ssh::CommandResult result;
    if (host_.run) {
      result = host_.run(command);
    } else {
      result.err = "sh: 1: command not found\n";
      result.status.code = 127;
    }
    return std::make_unique<FakeChannel>(std::move(result));
  }
  int keepalive(int) override { return 0; }

 private:
  ssh::Target target_;
  FakeHost host_;
  std::shared_ptr<std::vector<std::string>> log_;
  std::mutex* mutex_;
};

}  // namespace

void FakeConnector::add(const std::string& alias, FakeHost host) {
  std::lock_guard lock(mutex_);
  hosts_[alias] = std::move(host);
}

std::unique_ptr<ssh::Session> FakeConnector::connect(const ssh::Target& target,
                                                     ssh::Deadline deadline) {
  FakeHost host;
  {
    std::lock_guard lock(mutex_);
    targets_.push_back(target);
    auto it = hosts_.find(target.alias);
    if (it == hosts_.end())
      throw ssh::ConnectError(ssh::Verdict::dns, "'" + target.hostname + "' does not resolve");
    host = it->second;
  }
  auto until = ssh::Clock::now() + host.delay;
  if (until > deadline) {
    std::this_thread::sleep_until(deadline);
    throw ssh::ConnectError(ssh::Verdict::timeout, "no answer before the deadline");
  }
  std::this_thread::sleep_until(until);
  if (host.fail) throw ssh::ConnectError(*host.fail, host.detail, host.fix);
  return std::make_unique<FakeSession>(target, host, commands_, &mutex_);
}

std::vector<ssh::Target> FakeConnector::targets() const {
  std::lock_guard lock(mutex_);
  return targets_;
}

std::vector<std::string> FakeConnector::commands() const {
  std::lock_guard lock(mutex_);
  return *commands_;
}

FakeHost fake_host_with_version(const std::string& version) {
  FakeHost h;
  h.run = [version](const std::string& command) {
    ssh::CommandResult r;
    if (command.size() >= 10 && command.compare(command.size() - 10, 10, " --version") == 0) {
      r.out = version + "\nmore build details\n";
    } else {
      r.err = "unexpected command\n";
      r.status.code = 1;
    }
    return r;
  };
  return h;
}

}  // namespace hvdrun::testing
