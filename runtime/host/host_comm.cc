// Host-memory collectives (see host_comm.h). Across hosts every collective is three
// steps: inside each host through its segment, among the host leaders through their
// authenticated mesh (frame_comm.h), and inside each host again. A leader whose step fails marks
// its segment failed first, so the ranks of its host waiting in the third step fail at once with
// its reason.
//
// Keys, under the generation prefix:
//   shm/<host>/socket      name of local rank 0's socket that hands out the segment
//   hosts/<h>              "r0,r1,..": the global ranks of host h (leaders only)
//   frames/leaders/...     the leaders' authenticated mesh (frame_comm.cc)
//   leaders/bye/<k>        the leaders' final barrier
//   failure/count, failure/first   the first failure a rank saw in a collective
#include "runtime/host/host_comm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "common/deadline.h"
#include "common/seconds_text.h"
#include "rendezvous/protocol.h"
#include "runtime/core/sigpipe_blocked.h"
#include "runtime/core/timeline.h"
#include "runtime/frames/frame_comm.h"
#include "runtime/reduce/shm_reduce.h"
#include "runtime/shm/shm_exchange.h"
#include "runtime/shm/shm_segment.h"

namespace hvdrun::runtime {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> out;
  for (const char* p = s.c_str(); *p != '\0';) {
    char* end = nullptr;
    long v = std::strtol(p, &end, 10);
    if (end == p) break;
    out.push_back(static_cast<int>(v));
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

}  // namespace

// An alltoallv's matrix: at(i, j) bytes go from rank i to rank j. Outside the anonymous
// namespace: HostComm::Impl's members capture it.
struct Traffic {
  const std::vector<std::size_t>& m;
  std::size_t n;
  std::size_t at(std::size_t i, std::size_t j) const { return m[i * n + j]; }
  std::size_t sent_by(std::size_t i) const {
    std::size_t total = 0;
    for (std::size_t j = 0; j < n; ++j) total += at(i, j);
    return total;
  }
  std::size_t received_by(std::size_t j) const {
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += at(i, j);
    return total;
  }
};

class HostComm::Impl {
 public:
  Impl(rendezvous::Store* store, const std::string& prefix, const Environment& env,
       const std::string& local_ip, Clock::time_point deadline, bool host_checkin)
      : store_(store), ns_(prefix), env_(env), local_ip_(local_ip) {
    if (env_.size == 1) return;
    if (env_.host_path == "gloo") {
      SigpipeBlocked quiet;
      world_gloo_ =
          std::make_unique<GlooComm>(*store, ns_ / "gloo" / "world", env_.rank, env_.size, local_ip,
                                     env_.secret, env_.op_timeout, env_.op_timeout);
      return;
    }
    shm_path_ = true;
    if (env_.local_size > 1) {
      ShmMember me{env_.local_rank, env_.local_size, env_.rank, env_.size, env_.hostname};
      // Checking in through the leader, the other local ranks have no store yet: the
      // socket's name comes from the job secret instead of the store.
      shm_ = host_checkin ? std::make_unique<ShmComm>(nullptr, shm_socket_name(env_, prefix), me,
                                                      deadline, env_.op_timeout)
                          : std::make_unique<ShmComm>(store, ns_ / "shm" / env_.hostname / "socket",
                                                      me, deadline, env_.op_timeout);
    }
    if (env_.local_size == env_.size) {  // one host: nothing leaves it
      for (int l = 0; shm_ && l < env_.local_size; ++l)
        in_rank_order_ = in_rank_order_ && shm_->global_rank(l) == l;
      return;
    }
    across_hosts_ = true;
    leader_ = env_.local_rank == 0;
    if (!host_checkin) join_hosts(deadline);
  }

  // The leaders' part across hosts: their rank lists and their authenticated mesh.
  void join_hosts(Clock::time_point deadline) {
    if (!leader_ || leaders_) return;
    auto& store = *store_;
    const auto& local_ip = local_ip_;
    hosts_ = env_.cross_size;
    host_ = env_.cross_rank;
    std::string mine;
    for (int l = 0; l < env_.local_size; ++l)
      mine += (l ? "," : "") + std::to_string(shm_ ? shm_->global_rank(l) : env_.rank);
    store.set(ns_ / "hosts" / host_, mine);
    const std::vector<std::string> keys = (ns_ / "hosts").range(hosts_);
    store.wait(keys, time_left(deadline),
               "rank " + std::to_string(env_.rank) + " on " + env_.hostname +
                   ": waiting for the other hosts' leaders (local rank 0 of each host)");
    auto values = store.multi_get(keys);
    host_of_.assign(static_cast<std::size_t>(env_.size), -1);
    for (int h = 0; h < hosts_; ++h) {
      auto ranks = parse_ranks(values[static_cast<std::size_t>(h)].value_or(""));
      for (int r : ranks)
        if (r >= 0 && r < env_.size) host_of_[static_cast<std::size_t>(r)] = h;
      max_local_ = std::max(max_local_, static_cast<int>(ranks.size()));
      ranks_of_.push_back(std::move(ranks));
    }
    if (std::count(host_of_.begin(), host_of_.end(), -1) != 0)
      throw Error("rank " + std::to_string(env_.rank) + " on " + env_.hostname +
                  ": the host leaders' rank lists do not cover every rank (HVDRUN_CROSS_RANK/"
                  "HVDRUN_CROSS_SIZE of local rank 0 must number the hosts)");
    SigpipeBlocked quiet;
    leaders_ = std::make_unique<FrameComm>(store, ns_ / "frames" / "leaders", host_, hosts_,
                                           local_ip, env_.secret, env_.op_timeout, env_.op_timeout);
    leaders_->set_failure_key(ns_ / "failure" / "first");
  }

  // Runs a leader's step across hosts; on failure, the host's segment is marked failed
  // first so its other ranks stop waiting for this leader. An error across hosts names only
  // the peer, so the message gets the job's first reported failure (see guarded()).
  template <typename Fn>
  void across(Fn fn) {
    if (!leader_) return;
    try {
      SigpipeBlocked quiet;
      fn();
    } catch (const std::exception& e) {
      std::string why = "rank " + std::to_string(env_.rank) + " (the leader of host " +
                        env_.hostname + ") failed across hosts: " + e.what();
      auto first = first_failure();
      if (!first.empty()) why += "; the first failure reported in the job: " + first;
      if (shm_) shm_->abort(why);
      throw std::runtime_error(why);
    }
  }

  // Runs a collective across hosts; a failure seen first here (a local peer died, say)
  // is published in the store, so the other hosts' leaders, which only see their
  // connection to this host reset, can say what happened.
  template <typename Fn>
  void guarded(Fn fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      try {
        if (store_ && store_->add(ns_ / "failure" / "count", 1) == 1)
          store_->set(ns_ / "failure" / "first", "rank " + std::to_string(env_.rank) + " on " +
                                                     env_.hostname + ": " + e.what());
      } catch (const std::exception&) {  // the store is gone too: nothing more to say
      }
      throw;
    }
  }

  std::string first_failure() {
    try {
      const rendezvous::Key key = ns_ / "failure" / "first";
      // The failing host's leader publishes before it exits, which is what reset the
      // connection; a short wait covers the other order.
      if (store_ && store_->wait_for({key}, milliseconds(500)).empty())
        return store_->get(key).value_or("");
    } catch (const std::exception&) {
    }
    return "";
  }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
    if (world_gloo_) {
      if (send != recv && count > 0) std::memmove(recv, send, count * dtype_size(dtype));
      SigpipeBlocked quiet;
      const TimelineActivity a("GLOO_ALLREDUCE");
      world_gloo_->allreduce(recv, count, dtype, op);
      return;
    }
    if (!across_hosts_) {  // one host (or one rank)
      if (shm_) {
        const TimelineActivity a("SHM_ALLREDUCE");
        shm_->allreduce(send, recv, count, dtype, op, env_.size);
      } else {
        if (send != recv && count > 0) std::memmove(recv, send, count * dtype_size(dtype));
        finish_average(recv, count, dtype, op, env_.size);
      }
      return;
    }
    const ReduceOp sum_op = summing(op);
    guarded([&] {
      if (shm_) {
        const TimelineActivity a("SHM_ALLREDUCE");
        shm_->allreduce(send, recv, count, dtype, sum_op);
      } else if (send != recv && count > 0) {
        std::memmove(recv, send, count * dtype_size(dtype));
      }
      across([&] {
        const TimelineActivity a("TCP_ALLREDUCE");
        leaders_->allreduce(recv, count, dtype, sum_op);
      });
      if (shm_) {
        const TimelineActivity a("SHM_BCAST");
        shm_->broadcast(recv, count * dtype_size(dtype), 0);
      }
    });
    finish_average(recv, count, dtype, op, env_.size);
  }

  int local_index(int rank) const {
    if (!shm_) return rank == env_.rank ? 0 : -1;
    for (int l = 0; l < env_.local_size; ++l)
      if (shm_->global_rank(l) == rank) return l;
    return -1;
  }

  void broadcast(void* buf, std::size_t bytes, int root) {
    if (world_gloo_) {
      SigpipeBlocked quiet;
      const TimelineActivity a("GLOO_BCAST");
      return world_gloo_->broadcast(buf, bytes, root);
    }
    if (!across_hosts_) {
      const TimelineActivity a("SHM_BCAST");
      if (shm_) shm_->broadcast(buf, bytes, local_index(root));
      return;
    }
    const int root_local = local_index(root);
    auto local = [&](int from) {
      const TimelineActivity a("SHM_BCAST");
      shm_->broadcast(buf, bytes, from);
    };
    guarded([&] {
      if (root_local >= 0 && shm_) local(root_local);
      across([&] {
        const TimelineActivity a("TCP_BCAST");
        leaders_->broadcast(buf, bytes, host_of_[static_cast<std::size_t>(root)]);
      });
      if (root_local < 0 && shm_) local(0);
    });
  }

  void allgather(const void* send, void* recv, std::size_t bytes) {
    if (world_gloo_) {
      SigpipeBlocked quiet;
      const TimelineActivity a("GLOO_ALLGATHER");
      return world_gloo_->allgather(send, recv, bytes);
    }
    if (!across_hosts_) {
      const TimelineActivity a("SHM_ALLGATHER");
      if (!shm_) {
        if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
      } else if (in_rank_order_) {
        shm_->allgather(send, recv, bytes);
      } else {
        std::vector<char> blocks(bytes * static_cast<std::size_t>(env_.local_size));
        shm_->allgather(send, blocks.data(), bytes);
        for (int l = 0; l < env_.local_size; ++l)
          std::memcpy(
              static_cast<char*>(recv) + static_cast<std::size_t>(shm_->global_rank(l)) * bytes,
              blocks.data() + static_cast<std::size_t>(l) * bytes, bytes);
      }
      return;
    }
    const std::size_t L = static_cast<std::size_t>(env_.local_size);
    // The host's blocks in local rank order, padded to the largest host for the
    // leaders' equal-sized allgather, then put in global rank order by the leader.
    std::vector<char> host_block(std::max(static_cast<std::size_t>(max_local_), L) * bytes);
    guarded([&] {
      if (shm_) {
        const TimelineActivity a("SHM_ALLGATHER");
        shm_->allgather(send, host_block.data(), bytes);
      } else if (bytes > 0) {
        std::memcpy(host_block.data(), send, bytes);
      }
      across([&] {
        const TimelineActivity a("TCP_ALLGATHER");
        const std::size_t block = static_cast<std::size_t>(max_local_) * bytes;
        std::vector<char> all(block * static_cast<std::size_t>(hosts_));
        leaders_->allgather(host_block.data(), all.data(), block);
        for (int h = 0; h < hosts_; ++h) {
          const auto& ranks = ranks_of_[static_cast<std::size_t>(h)];
          for (std::size_t l = 0; l < ranks.size(); ++l)
            std::memcpy(static_cast<char*>(recv) + static_cast<std::size_t>(ranks[l]) * bytes,
                        all.data() + static_cast<std::size_t>(h) * block + l * bytes, bytes);
        }
      });
      if (shm_) {
        const TimelineActivity a("SHM_BCAST");
        shm_->broadcast(recv, bytes * static_cast<std::size_t>(env_.size), 0);
      }
    });
  }

  bool moves_used_bytes() const { return !world_gloo_ && !across_hosts_ && shm_ && in_rank_order_; }

  void allgather_upto(const void* send, std::size_t used, void* recv, std::size_t bytes) {
    if (!moves_used_bytes()) {
      allgather(send, recv, bytes);
      return;
    }
    const TimelineActivity a("SHM_ALLGATHER");
    shm_->allgather_upto(send, used, recv, bytes);
  }

  // Alltoallv: m[i * n + j] bytes go from rank i to rank j (every rank has the whole
  // matrix). Inside a host the ranks stream through the segment; across hosts each host's
  // ranks stream to their leader, the leaders exchange pairwise over their mesh, and each leader
  // streams every local rank its received blocks.
  // The host's global rank of local rank `l`.
  std::size_t global_of(std::size_t l) const {
    return shm_ ? static_cast<std::size_t>(shm_->global_rank(static_cast<int>(l)))
                : static_cast<std::size_t>(env_.rank);
  }

  void alltoallv(const void* send, void* recv, const std::vector<std::size_t>& m) {
    const Traffic t{m, static_cast<std::size_t>(env_.size)};
    const auto me = static_cast<std::size_t>(env_.rank);
    if (world_gloo_) {
      std::vector<std::size_t> row(t.n), col(t.n);
      for (std::size_t k = 0; k < t.n; ++k) {
        row[k] = t.at(me, k);
        col[k] = t.at(k, me);
      }
      SigpipeBlocked quiet;
      const TimelineActivity a("GLOO_ALLTOALL");
      return world_gloo_->alltoallv(send, row, recv, col);
    }
    if (!shm_ && !across_hosts_) {
      if (t.at(0, 0) > 0 && send != recv) std::memmove(recv, send, t.at(0, 0));
      return;
    }
    if (across_hosts_) {
      guarded([&] { alltoallv_across_hosts(send, recv, t); });
      return;
    }
    // One host: each source's block for this rank, taken from its stream.
    const auto L = static_cast<std::size_t>(env_.local_size);
    std::vector<std::size_t> stream(L);
    std::vector<StreamPiece> pieces;
    for (std::size_t l = 0; l < L; ++l) {
      const std::size_t g = global_of(l);
      stream[l] = t.sent_by(g);
      std::size_t offset = 0, dest = 0;
      for (std::size_t j = 0; j < me; ++j) offset += t.at(g, j);
      for (std::size_t i = 0; i < g; ++i) dest += t.at(i, me);
      if (t.at(g, me) > 0) pieces.push_back({static_cast<int>(l), offset, t.at(g, me), dest});
    }
    const TimelineActivity a("SHM_ALLTOALL");
    shm_stream(*shm_, send, stream, recv, pieces, env_.local_rank);
  }

  // Alltoallv across hosts: the host's ranks stream to their leader, the leaders exchange
  // pairwise over their mesh, and each leader streams every local rank its blocks.
  void alltoallv_across_hosts(const void* send, void* recv, const Traffic& t) {
    const std::size_t n = t.n;
    const auto L = static_cast<std::size_t>(env_.local_size);
    auto at = [&](std::size_t i, std::size_t j) { return t.at(i, j); };
    auto sent_by = [&](std::size_t i) { return t.sent_by(i); };
    auto received_by = [&](std::size_t j) { return t.received_by(j); };
    auto global = [&](std::size_t l) { return global_of(l); };
    // 1. The host's send buffers to its leader, one after another in local order.
    std::vector<std::size_t> stream(L, 0), first(L + 1, 0);
    for (std::size_t l = 0; l < L; ++l) {
      stream[l] = sent_by(global(l));
      first[l + 1] = first[l] + stream[l];
    }
    std::vector<char> gathered;
    const char* from_host = static_cast<const char*>(send);
    if (shm_) {
      std::vector<StreamPiece> pieces;
      if (leader_) {
        gathered.resize(first[L]);
        for (std::size_t l = 0; l < L; ++l)
          if (stream[l] > 0) pieces.push_back({static_cast<int>(l), 0, stream[l], first[l]});
      }
      const TimelineActivity a("SHM_GATHER");
      shm_stream(*shm_, send, stream, gathered.data(), pieces, env_.local_rank);
      from_host = gathered.data();
    }
    // 2. and 3. on the leader: blocks by destination host across hosts, then the blocks for
    // each local rank in source rank order, streamed back (rank l's part is its result).
    std::vector<char> out_stream;
    std::vector<std::size_t> back(L, 0), where(L + 1, 0);
    for (std::size_t l = 0; l < L; ++l) {
      back[l] = received_by(global(l));
      where[l + 1] = where[l] + back[l];
    }
    across([&] {
      const auto H = static_cast<std::size_t>(hosts_);
      const auto& mine = ranks_of_[static_cast<std::size_t>(host_)];
      // Where block (i -> j) of a local source i starts in `from_host`.
      auto source_offset = [&](std::size_t l, std::size_t j) {
        std::size_t o = first[l];
        for (std::size_t k = 0; k < j; ++k) o += at(global(l), k);
        return o;
      };
      std::vector<std::size_t> to_host(H, 0), from_hosts(H, 0);
      for (std::size_t h = 0; h < H; ++h)
        for (int i : ranks_of_[h])
          for (int j : mine)
            from_hosts[h] += at(static_cast<std::size_t>(i), static_cast<std::size_t>(j));
      std::vector<char> outgoing;
      for (std::size_t h = 0; h < H; ++h) {
        for (std::size_t l = 0; l < mine.size(); ++l)
          for (int j : ranks_of_[h]) {
            const std::size_t b = at(global(l), static_cast<std::size_t>(j));
            const char* src = from_host + source_offset(l, static_cast<std::size_t>(j));
            outgoing.insert(outgoing.end(), src, src + b);
            to_host[h] += b;
          }
      }
      std::vector<char> incoming(
          std::accumulate(from_hosts.begin(), from_hosts.end(), std::size_t{0}));
      {
        const TimelineActivity a("TCP_ALLTOALL");
        leaders_->alltoallv(outgoing.data(), to_host, incoming.data(), from_hosts);
      }
      // incoming: per source host h, per source i of h, per local destination j.
      std::vector<std::size_t> block_at(n * L, 0);
      std::size_t o = 0;
      for (std::size_t h = 0; h < H; ++h)
        for (int i : ranks_of_[h])
          for (std::size_t l = 0; l < mine.size(); ++l) {
            block_at[static_cast<std::size_t>(i) * L + l] = o;
            o += at(static_cast<std::size_t>(i), global(l));
          }
      out_stream.resize(where[L]);
      for (std::size_t l = 0; l < L; ++l) {
        std::size_t d = where[l];
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t b = at(i, global(l));
          if (b > 0) std::memcpy(out_stream.data() + d, incoming.data() + block_at[i * L + l], b);
          d += b;
        }
      }
    });
    if (!shm_) {
      if (!out_stream.empty()) std::memcpy(recv, out_stream.data(), out_stream.size());
      return;
    }
    std::vector<std::size_t> streams(L, 0);
    streams[0] = where[L];
    const auto l = static_cast<std::size_t>(env_.local_rank);
    std::vector<StreamPiece> pieces;
    if (back[l] > 0) pieces.push_back({0, where[l], back[l], 0});
    const TimelineActivity a("SHM_SCATTER");
    shm_stream(*shm_, out_stream.data(), streams, recv, pieces, env_.local_rank);
  }

  // Reduce-scatter: rank r receives the reduction of elements [first_r, first_r +
  // counts[r]). Inside one host a true reduce-scatter through the segment; otherwise an
  // allreduce of the whole tensor, of which each rank keeps its slice.
  void reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                     DataType dtype, ReduceOp op) {
    const std::size_t es = dtype_size(dtype);
    const auto me = static_cast<std::size_t>(env_.rank);
    std::size_t first = 0, total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      if (r < me) first += counts[r];
      total += counts[r];
    }
    const auto* in = static_cast<const char*>(send);
    auto* out = static_cast<char*>(recv);
    const bool overlap = out < in + total * es && in < out + counts[me] * es;
    if (!world_gloo_ && !across_hosts_ && shm_ && in_rank_order_ && !overlap) {
      const TimelineActivity a("SHM_REDUCESCATTER");
      shm_reducescatter(*shm_, send, recv, counts, dtype, op, env_.size, env_.local_rank);
      return;
    }
    std::vector<char> full(total * es);
    allreduce(send, full.data(), total, dtype, op);
    if (counts[me] > 0) std::memmove(recv, full.data() + first * es, counts[me] * es);
  }

  void barrier() {
    if (!across_hosts_) {
      if (shm_) shm_->barrier();
      return;
    }
    guarded([&] {
      if (shm_) shm_->barrier();
      across([&] {
        int one = 1;
        leaders_->allreduce(&one, 1, DataType::kInt32, ReduceOp::kSum);
      });
      if (shm_) shm_->barrier();
    });
  }

  // A last barrier through the store among those holding TCP pairs (the host leaders, or
  // with HVDRUN_HOST_PATH=gloo every rank), so that none closes a pair another still reads
  // its last message from: Gloo fails that read with "Connection closed by peer".
  void farewell(milliseconds timeout) {
    const bool gloo = world_gloo_ && world_gloo_->connected_pairs() > 0;
    if (!gloo && (!leaders_ || leaders_->connected_pairs() == 0)) return;
    const long long k = ++farewell_seq_;
    const rendezvous::Key base = ns_ / (gloo ? "gloo" : "leaders") / "bye" / std::to_string(k);
    if (store_->add(base, 1) == (gloo ? env_.size : hosts_)) store_->set(base / "done", "1");
    store_->wait({base / "done"}, timeout,
                 gloo ? "the other ranks' final barrier" : "the other host leaders' final barrier");
  }

  rendezvous::Store* store_;  // null on a rank that checked in through its host's leader
  rendezvous::Key ns_;        // the generation's key prefix
  const Environment& env_;
  std::string local_ip_;
  bool shm_path_ = false;
  bool across_hosts_ = false;  // more than one host: leaders talk over FrameComm
  bool leader_ = false;        // local rank 0 of a job across hosts
  bool in_rank_order_ = true;  // one host: local rank l is global rank l
  int hosts_ = 1;
  int host_ = 0;
  int max_local_ = 0;
  long long farewell_seq_ = 0;
  std::vector<int> host_of_;
  std::vector<std::vector<int>> ranks_of_;
  std::unique_ptr<ShmComm> shm_;
  std::unique_ptr<InterHostComm> leaders_;  // a FrameComm
  std::unique_ptr<GlooComm> world_gloo_;
};

HostComm::HostComm(rendezvous::Store* store, const std::string& prefix, const Environment& env,
                   const std::string& local_ip, std::chrono::steady_clock::time_point deadline,
                   bool host_checkin)
    : impl_(std::make_unique<Impl>(store, prefix, env, local_ip, deadline, host_checkin)) {}
void HostComm::join_hosts(std::chrono::steady_clock::time_point deadline) {
  impl_->join_hosts(deadline);
}
ShmComm* HostComm::shm() { return impl_->shm_.get(); }

HostComm::~HostComm() = default;

void HostComm::allreduce(const void* send, void* recv, std::size_t count, DataType dtype,
                         ReduceOp op) {
  impl_->allreduce(send, recv, count, dtype, op);
}
bool HostComm::allreduce_agreed(const void* send, void* recv, std::size_t count, DataType dtype,
                                ReduceOp op, const ShmComm::Notes& notes) {
  if (!moves_used_bytes())
    throw Error(
        "hvdrun: an allreduce that carries its round runs only where every rank of the group is "
        "on one host over shared memory; its caller checks moves_used_bytes() first");
  const TimelineActivity a("SHM_ALLREDUCE");
  return shm()->allreduce_agreed(send, recv, count, dtype, op, impl_->env_.size, notes);
}
void HostComm::broadcast(void* buf, std::size_t bytes, int root) {
  impl_->broadcast(buf, bytes, root);
}
void HostComm::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->allgather(send, recv, bytes);
}
void HostComm::allgather_upto(const void* send, std::size_t used, void* recv, std::size_t bytes) {
  impl_->allgather_upto(send, used, recv, bytes);
}
void HostComm::alltoallv(const void* send, void* recv, const std::vector<std::size_t>& matrix) {
  impl_->alltoallv(send, recv, matrix);
}
void HostComm::reducescatter(const void* send, void* recv, const std::vector<std::size_t>& counts,
                             DataType dtype, ReduceOp op) {
  impl_->reducescatter(send, recv, counts, dtype, op);
}
bool HostComm::moves_used_bytes() const { return impl_->moves_used_bytes(); }
bool HostComm::has_barrier() const { return impl_->shm_path_; }
void HostComm::barrier() { impl_->barrier(); }
void HostComm::farewell(std::chrono::milliseconds timeout) { impl_->farewell(timeout); }
int HostComm::world_gloo_pairs() const {
  return impl_->world_gloo_ ? impl_->world_gloo_->connected_pairs() : 0;
}
GlooComm* HostComm::world_gloo() { return impl_->world_gloo_.get(); }

std::string HostComm::describe() const {
  if (impl_->world_gloo_) return "Gloo among all " + std::to_string(impl_->env_.size) + " ranks";
  std::string s =
      impl_->shm_ ? "shared memory among " + std::to_string(impl_->env_.local_size) + " local ranks"
                  : "no local peers";
  if (impl_->leaders_)
    s += " + authenticated frames among " + std::to_string(impl_->hosts_) + " host leaders";
  return s;
}

}  // namespace hvdrun::runtime
