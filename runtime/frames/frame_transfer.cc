// The host leaders' mesh (runtime/frames/frame_mesh.h): messages cut into frames, each MAC'd under
// its direction's key with its sequence number as the IV, and the poll loop that moves
// every transfer of a step at once. A received frame's payload lands in its peer's staging
// buffer, not in the caller's: only once the frame's tag checks is it copied out (or
// reduced from there), so a rejected frame, or one cut short, leaves nothing in memory the
// caller reads.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <thread>

#include "common/peer_loss.h"
#include "runtime/core/generation_end.h"
#include "runtime/frames/frame_mesh.h"

namespace hvdrun::runtime {

std::array<unsigned char, rendezvous::kGmacIvBytes> FrameComm::Impl::iv_of(std::uint64_t seq) {
  std::array<unsigned char, rendezvous::kGmacIvBytes> iv{};
  put64(iv.data(), seq);
  return iv;
}

void FrameComm::Impl::start_frame(Job& j) {
  Peer& peer = peers_[static_cast<std::size_t>(j.peer)];
  j.frame_len = std::min(kFrameBytes, j.bytes - j.frame * kFrameBytes);
  j.moved = 0;
  j.started = true;
  if (!j.send) {
    if (peer.staging.empty()) peer.staging.resize(kFrameBytes);
    return;
  }
  put32(j.header.data(), kFrameMagic);
  put32(j.header.data() + 4, 0);
  put64(j.header.data() + 8, j.frame_len);
  rendezvous::GmacStream mac(*peer.send_key);
  mac.update(j.header.data(), kFrameHeaderBytes);
  mac.update(j.data + j.frame * kFrameBytes, j.frame_len);
  j.tag = mac.finish(iv_of(peer.send_seq++).data());
}

[[noreturn]] void FrameComm::Impl::frame_error(const Job& j, const std::string& what) {
  throw Error("frames: rank " + std::to_string(rank_) + " rejected frame " +
              std::to_string(j.frame) + " of a message from rank " + std::to_string(j.peer) + ": " +
              what +
              ". The connection between the two host leaders was written into by something "
              "other than the peer (or corrupted); this collective is aborted and no data from "
              "the frame was used (docs/security.md)");
}

void FrameComm::Impl::finish_recv_frame(Job& j) {
  Peer& peer = peers_[static_cast<std::size_t>(j.peer)];
  const unsigned char* payload = peer.staging.data();
  rendezvous::GmacStream mac(*peer.recv_key);
  mac.update(j.header.data(), kFrameHeaderBytes);
  mac.update(payload, j.frame_len);
  const auto want = mac.finish(iv_of(peer.recv_seq).data());
  if (!rendezvous::gmac_tags_equal(want.data(), j.tag.data())) {
    if (get32(j.header.data()) != kFrameMagic || get64(j.header.data() + 8) != j.frame_len)
      frame_error(j, "its header is not the one expected (" + std::to_string(j.frame_len) +
                         " bytes), and its MAC does not check");
    frame_error(j,
                "its MAC does not check (sequence number " + std::to_string(peer.recv_seq) + ")");
  }
  ++peer.recv_seq;
  // The frame was read into staging a moment ago and checked from there: the copy and the
  // reduction read it from cache.
  const std::size_t at = j.frame * kFrameBytes;
  if (j.data != nullptr) std::memcpy(j.data + at, payload, j.frame_len);
  if (j.on_frame) j.on_frame(at, payload, j.frame_len);
}

bool FrameComm::Impl::step(Job& j) {
  if (!j.started) start_frame(j);
  const int fd = peers_[static_cast<std::size_t>(j.peer)].fd.get();
  const std::size_t total = kFrameHeaderBytes + j.frame_len + kTagBytes;
  unsigned char* payload = j.send ? j.data + j.frame * kFrameBytes
                                  : peers_[static_cast<std::size_t>(j.peer)].staging.data();
  std::array<iovec, 3> iov{};
  int n = 0;
  std::size_t at = j.moved;
  const auto add = [&](unsigned char* base, std::size_t len) {
    if (at < len) iov[static_cast<std::size_t>(n++)] = {base + at, len - at};
    at = at > len ? at - len : 0;
  };
  add(j.header.data(), kFrameHeaderBytes);
  add(payload, j.frame_len);
  add(j.tag.data(), kTagBytes);
  ssize_t r;
  if (j.send) {
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = static_cast<std::size_t>(n);
    r = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } else {
    r = ::readv(fd, iov.data(), n);
  }
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    throw Error("frames: rank " + std::to_string(rank_) +
                (j.send ? " sending to" : " receiving from") + " rank " + std::to_string(j.peer) +
                ": " + std::strerror(errno) + ". " + std::string(kPeerLossSentence));
  }
  if (r == 0)
    throw Error("frames: rank " + std::to_string(rank_) + ": rank " + std::to_string(j.peer) +
                " closed its connection in the middle of a collective. " +
                std::string(kPeerLossSentence));
  j.moved += static_cast<std::size_t>(r);
  if (j.moved == total) {
    if (!j.send) finish_recv_frame(j);
    ++j.frame;
    j.started = false;
  }
  return true;
}

void FrameComm::Impl::run(std::vector<Job>& jobs) {
  const auto deadline = Clock::now() + op_timeout_;
  std::size_t sent = 0;
  bool receives = false;
  for (const auto& j : jobs) {
    if (j.send) sent += j.bytes;
    receives = receives || !j.send;
  }
  try {
    if (sent < kThreadedBytes || !receives) {
      pump(jobs, deadline, true, true, nullptr);
      return;
    }
    std::atomic<bool> stop{false};
    std::exception_ptr send_error;
    std::thread sender([&] {
      try {
        pump(jobs, deadline, true, false, &stop);
      } catch (...) {
        send_error = std::current_exception();
      }
    });
    try {
      pump(jobs, deadline, false, true, nullptr);
    } catch (...) {
      stop = true;  // the sender gives up within one poll slice
      sender.join();
      throw;
    }
    sender.join();
    if (send_error) std::rethrow_exception(send_error);
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
}

void FrameComm::Impl::pump(std::vector<Job>& jobs, Clock::time_point deadline, bool sends,
                           bool receives, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop && *stop) return;
    std::vector<pollfd> fds;
    std::vector<Job*> active;
    std::vector<bool> seen(static_cast<std::size_t>(size_) * 2, false);
    bool pending = false;
    for (auto& j : jobs) {
      if (j.send ? !sends : !receives) continue;
      const std::size_t slot = static_cast<std::size_t>(j.peer) * 2 + (j.send ? 1 : 0);
      if (j.done()) continue;
      pending = true;
      if (seen[slot]) continue;
      seen[slot] = true;
      // Make progress without a poll while the socket keeps taking or giving.
      for (int k = 0; k < 8 && !j.done() && step(j); ++k) {
      }
      if (j.done()) continue;
      active.push_back(&j);
      fds.push_back({peers_[static_cast<std::size_t>(j.peer)].fd.get(),
                     static_cast<short>(j.send ? POLLOUT : POLLIN), 0});
    }
    if (!pending) return;
    if (active.empty()) continue;
    // The generation's end (runtime/core/generation_end.h) wakes the poll at once.
    fds.push_back({generation_end().fd(), POLLIN, 0});
    const int left = millis_left(deadline);
    if (left == 0 || (::poll(fds.data(), fds.size(), stop ? std::min(left, 100) : left) == 0 &&
                      millis_left(deadline) == 0)) {
      std::string who;
      for (const Job* j : active)
        who += (who.empty() ? "" : ", ") + std::string(j->send ? "to " : "from ") + "rank " +
               std::to_string(j->peer);
      throw Error("frames: rank " + std::to_string(rank_) +
                  ": a collective across hosts did not complete within " +
                  std::to_string(op_timeout_.count() / 1000) + " s (waiting " + who + "). " +
                  std::string(kPeerLossSentence));
    }
    generation_end().check();
  }
}

FrameComm::Impl::Job FrameComm::Impl::send_job(int peer, const void* data, std::size_t bytes) {
  Job j;
  j.peer = peer;
  j.send = true;
  j.data = static_cast<unsigned char*>(const_cast<void*>(data));  // only read
  j.bytes = bytes;
  return j;
}

FrameComm::Impl::Job FrameComm::Impl::recv_job(int peer, void* data, std::size_t bytes,
                                               OnFrame on_frame) {
  Job j;
  j.peer = peer;
  j.send = false;
  j.data = static_cast<unsigned char*>(data);
  j.bytes = bytes;
  j.on_frame = std::move(on_frame);
  return j;
}

}  // namespace hvdrun::runtime
