// The host leaders' mesh of runtime/frames/frame_comm.h: its collectives over the pairs and the
// frames of runtime/frames/frame_mesh.h (frame_handshake.cc, frame_transfer.cc).
#include "runtime/frames/frame_comm.h"

#include <algorithm>
#include <cstring>

#include "runtime/frames/frame_mesh.h"
#include "runtime/reduce/shm_reduce.h"

namespace hvdrun::runtime {

FrameComm::Impl::Impl(rendezvous::Store& store, std::string prefix, int rank, int size,
                      const std::string& local_ip, const std::string& secret,
                      std::chrono::milliseconds op_timeout,
                      std::chrono::milliseconds connect_timeout)
    : store_(store),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      op_timeout_(op_timeout),
      connect_timeout_(connect_timeout),
      hmac_(secret),
      peers_(static_cast<std::size_t>(size)) {
  if (size_ < 2) return;
  if (secret.empty())
    throw Error("frames: rank " + std::to_string(rank) +
                ": no job secret to authenticate its connections with (HVDRUN_SECRET)");
  nonce_ = rendezvous::random_bytes(kNonceBytes);
  listen_on(local_ip);
}

void FrameComm::Impl::allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
  if (size_ > 1 && count > 0 && count * dtype_size(dtype) <= kSmallAllreduceBytes) {
    allreduce_small(static_cast<unsigned char*>(buf), count, dtype, op);
  } else if (size_ > 1 && count > 0) {
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    ensure_peers({left, right});
    const std::size_t es = dtype_size(dtype);
    const auto n = static_cast<std::size_t>(size_);
    std::vector<std::size_t> off(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i)
      off[i + 1] = off[i] + (count / n + (i < count % n ? 1 : 0)) * es;
    auto* base = static_cast<unsigned char*>(buf);
    const auto seg = [&](int s) { return static_cast<std::size_t>((s % size_ + size_) % size_); };
    for (int s = 0; s < size_ - 1; ++s) {  // reduce-scatter
      const std::size_t out = seg(rank_ - s), in = seg(rank_ - s - 1);
      unsigned char* dst = base + off[in];
      std::vector<Job> jobs;
      jobs.push_back(send_job(right, base + off[out], off[out + 1] - off[out]));
      // Each checked frame is reduced straight from where it was checked (no copy first).
      jobs.push_back(recv_job(left, nullptr, off[in + 1] - off[in],
                              [&, dst](std::size_t o, const unsigned char* p, std::size_t len) {
                                reduce_into(dst + o, p, len / es, dtype, op);
                              }));
      run(jobs);
    }
    for (int s = 0; s < size_ - 1; ++s) {  // allgather of the reduced segments
      const std::size_t out = seg(rank_ + 1 - s), in = seg(rank_ - s);
      std::vector<Job> jobs;
      jobs.push_back(send_job(right, base + off[out], off[out + 1] - off[out]));
      jobs.push_back(recv_job(left, base + off[in], off[in + 1] - off[in]));
      run(jobs);
    }
  }
  finish_average(buf, count, dtype, op, size_);
}

void FrameComm::Impl::allreduce_small(unsigned char* buf, std::size_t count, DataType dtype,
                                      ReduceOp op) {
  const std::size_t bytes = count * dtype_size(dtype);
  int p2 = 1;
  while (p2 * 2 <= size_) p2 *= 2;
  const int rem = size_ - p2;
  const bool folded = rank_ < 2 * rem && rank_ % 2 == 0;  // sits out the doubling
  const int vr = rank_ < 2 * rem ? rank_ / 2 : rank_ - rem;
  const auto real = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  std::vector<int> needed;
  if (rank_ < 2 * rem) needed.push_back(rank_ ^ 1);
  if (!folded)
    for (int mask = 1; mask < p2; mask <<= 1) needed.push_back(real(vr ^ mask));
  ensure_peers(needed);
  scratch_.resize(bytes);
  // Combines the partner's value (in scratch_) with this rank's, lower group first.
  const auto combine = [&](bool theirs_lower) {
    if (theirs_lower) {
      reduce_into(scratch_.data(), buf, count, dtype, op);
      std::memcpy(buf, scratch_.data(), bytes);
    } else {
      reduce_into(buf, scratch_.data(), count, dtype, op);
    }
  };
  const auto exchange = [&](int peer, bool send, bool recv, void* into) {
    std::vector<Job> jobs;
    if (send) jobs.push_back(send_job(peer, buf, bytes));
    if (recv) jobs.push_back(recv_job(peer, into, bytes));
    run(jobs);
  };
  if (folded) {
    exchange(rank_ + 1, true, false, nullptr);
    exchange(rank_ + 1, false, true, buf);
    return;
  }
  if (rank_ < 2 * rem) {
    exchange(rank_ - 1, false, true, scratch_.data());
    combine(true);
  }
  for (int mask = 1; mask < p2; mask <<= 1) {
    exchange(real(vr ^ mask), true, true, scratch_.data());
    combine((vr ^ mask) < vr);
  }
  if (rank_ < 2 * rem) exchange(rank_ - 1, true, false, nullptr);
}

std::pair<int, std::vector<int>> FrameComm::Impl::tree(int root) const {
  const int vr = (rank_ - root + size_) % size_;
  int parent = -1, mask = 1;
  for (; mask < size_; mask <<= 1)
    if (vr & mask) {
      parent = (vr - mask + root) % size_;
      break;
    }
  std::vector<int> children;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < size_) children.push_back((vr + mask + root) % size_);
  return {parent, children};
}

std::vector<int> FrameComm::Impl::peers_of(Topology topology, int root) const {
  if (size_ < 2) return {};
  switch (topology) {
    case Topology::kRing:
      return {(rank_ + size_ - 1) % size_, (rank_ + 1) % size_};
    case Topology::kStar:
      return rank_ == root ? all_peers() : std::vector<int>{root};
    case Topology::kFullMesh:
      break;
  }
  return all_peers();
}

void FrameComm::Impl::broadcast(void* buf, std::size_t bytes, int root) {
  if (size_ < 2 || bytes == 0) return;
  auto [parent, children] = tree(root);
  std::vector<int> needed = children;
  if (parent >= 0) needed.push_back(parent);
  ensure_peers(needed);
  if (parent >= 0) {
    std::vector<Job> jobs;
    jobs.push_back(recv_job(parent, buf, bytes));
    run(jobs);
  }
  std::vector<Job> jobs;
  for (int c : children) jobs.push_back(send_job(c, buf, bytes));
  if (!jobs.empty()) run(jobs);
}

void FrameComm::Impl::allgather(const void* send, void* recv, std::size_t bytes) {
  auto* out = static_cast<unsigned char*>(recv);
  unsigned char* own = out + bytes * static_cast<std::size_t>(rank_);
  if (send != own) std::memmove(own, send, bytes);
  if (size_ < 2 || bytes == 0) return;
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  ensure_peers({left, right});
  const auto blk = [&](int s) {
    return out + bytes * static_cast<std::size_t>((s % size_ + size_) % size_);
  };
  for (int s = 0; s < size_ - 1; ++s) {
    std::vector<Job> jobs;
    jobs.push_back(send_job(right, blk(rank_ - s), bytes));
    jobs.push_back(recv_job(left, blk(rank_ - s - 1), bytes));
    run(jobs);
  }
}

void FrameComm::Impl::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes,
                                void* recv, const std::vector<std::size_t>& recv_bytes) {
  std::size_t so = 0, ro = 0;
  std::vector<Job> jobs;
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  for (int p = 0; p < size_; ++p) {
    const auto i = static_cast<std::size_t>(p);
    if (p == rank_) {
      if (send_bytes[i] > 0 && in + so != out + ro) std::memmove(out + ro, in + so, send_bytes[i]);
    } else {
      jobs.push_back(send_job(p, in + so, send_bytes[i]));
      jobs.push_back(recv_job(p, out + ro, recv_bytes[i]));
    }
    so += send_bytes[i];
    ro += recv_bytes[i];
  }
  if (size_ < 2) return;
  ensure_peers(all_peers());
  run(jobs);
}

FrameComm::FrameComm(rendezvous::Store& store, std::string prefix, int rank, int size,
                     const std::string& local_ip, const std::string& secret,
                     std::chrono::milliseconds op_timeout,
                     std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>(store, std::move(prefix), rank, size, local_ip, secret,
                                   op_timeout, connect_timeout)) {}
FrameComm::~FrameComm() = default;

void FrameComm::allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
  impl_->allreduce(buf, count, dtype, op);
}
void FrameComm::broadcast(void* buf, std::size_t bytes, int root) {
  impl_->broadcast(buf, bytes, root);
}
void FrameComm::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->allgather(send, recv, bytes);
}
void FrameComm::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                          const std::vector<std::size_t>& recv_bytes) {
  impl_->alltoallv(send, send_bytes, recv, recv_bytes);
}
void FrameComm::connect(Topology topology, int root) {
  impl_->ensure_peers(impl_->peers_of(topology, root));
}
void FrameComm::set_failure_key(std::string key) { impl_->failure_key_ = std::move(key); }
int FrameComm::connected_pairs() const {
  int n = 0;
  for (const auto& p : impl_->peers_) n += p.fd ? 1 : 0;
  return n;
}
int FrameComm::socket_for_testing(int peer) const {
  if (peer < 0 || peer >= impl_->size_) return -1;
  return impl_->peers_[static_cast<std::size_t>(peer)].fd.get();
}

}  // namespace hvdrun::runtime
