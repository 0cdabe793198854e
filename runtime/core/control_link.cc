#include "runtime/core/control_link.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "hvdrun/hvdrun.h"
#include "runtime/core/generation_end.h"

namespace hvdrun::runtime {

ControlLink::ControlLink(UniqueFd fd) : fd_(std::move(fd)) {
  auto [r, w] = make_pipe();
  stop_read_ = std::move(r);
  stop_write_ = std::move(w);
  reader_ = std::thread([this] { read_loop(); });
}

ControlLink::~ControlLink() {
  const char byte = 's';
  while (::write(stop_write_.get(), &byte, 1) < 0 && errno == EINTR) {
  }
  if (reader_.joinable()) reader_.join();
}

void ControlLink::keep_for_process() { reader_.detach(); }

void ControlLink::read_loop() {
  control::Decoder decoder;
  std::string why;
  bool garbled = false;
  std::array<char, 4096> buf{};
  for (;;) {
    std::array<pollfd, 2> fds{{{fd_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}}};
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      why = std::string("poll: ") + std::strerror(errno);
      break;
    }
    if (fds[1].revents != 0) return;  // stopping: the generation goes on
    const ssize_t n = ::read(fd_.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      why = std::string("read: ") + std::strerror(errno);
      break;
    }
    if (n == 0) {
      why = "end of file";
      break;
    }
    try {
      decoder.feed(std::string_view(buf.data(), static_cast<std::size_t>(n)));
      while (auto m = decoder.next()) {
        if (auto* end = std::get_if<control::EndGeneration>(&*m)) {
          generation_end().end(end->reason, end->generation);
        } else if (auto* p = std::get_if<control::Placement>(&*m)) {
          std::lock_guard lock(mu_);
          if (!placement_ || placement_->generation < p->generation) placement_ = *p;
          changed_.notify_all();
        } else {
          throw control::ProtocolError(
              "control channel: the agent sent a message only a rank sends");
        }
      }
    } catch (const control::ProtocolError& e) {
      why = e.what();
      garbled = true;
      break;
    }
  }
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    changed_.notify_all();
  }
  // What the rank can no longer hear, it cannot follow: the generation ends either way.
  const std::string what = garbled ? "the control channel from this rank's agent carried a "
                                     "malformed frame (" +
                                         why + ")"
                                   : "the control channel from this rank's agent closed (" + why +
                                         "): the agent or the launcher is gone";
  hvdrun::log().warn("{}; this generation ends", what);
  generation_end().end(what);
}

void ControlLink::send(const control::Message& m) {
  const std::string frame = control::encode(m);
  std::lock_guard lock(send_mu_);
  std::size_t at = 0;
  while (at < frame.size()) {
    const ssize_t n = ::send(fd_.get(), frame.data() + at, frame.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(std::string("libhvdrun: telling this rank's agent (control channel): ") +
                  std::strerror(errno) + "; the agent or the launcher is gone");
    at += static_cast<std::size_t>(n);
  }
}

void ControlLink::declare_elastic(int generation) { send(control::Elastic{generation}); }

void ControlLink::left(int generation) { send(control::Left{generation}); }

std::optional<control::Placement> ControlLink::wait_placement(
    int after, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  changed_.wait_until(lock, deadline,
                      [&] { return closed_ || (placement_ && placement_->generation > after); });
  if (placement_ && placement_->generation > after) return placement_;
  return std::nullopt;
}

bool ControlLink::placement_pending(int after) const {
  std::lock_guard lock(mu_);
  return placement_ && placement_->generation > after;
}

std::optional<control::Placement> ControlLink::pending(int after) const {
  std::lock_guard lock(mu_);
  if (placement_ && placement_->generation > after) return placement_;
  return std::nullopt;
}

bool ControlLink::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace hvdrun::runtime
