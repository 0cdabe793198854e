// Gloo communicator with on-demand pairs (see gloo_comm.h). The connect step runs in
// two phases: first every pair where this rank is Gloo's connecting side (which never
// waits for the peer's program, only for its listening socket, which exists as soon as
// the address is published), then every pair where it is the listening side. Because
// the first phase cannot block on a peer, the second always completes: no cycle of
// ranks waiting on each other can form, whatever the order of calls.
//
// Gloo's listening end takes the first connection that arrives, whoever makes it. So
// before a pair carries anything else, both ends prove the job secret over the pair itself
// (a nonce each way, then an HMAC each way over both nonces, the ranks and the mesh): a
// pair whose other end is not the peer rank fails with an error naming it, and no
// algorithm ever reads from it.
#include "runtime/gloo/gloo_comm.h"

#include <netinet/in.h>
#include <spdlog/spdlog.h>

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <type_traits>
#include <unordered_map>

#include "common/peer_loss.h"
#include "rendezvous/protocol.h"
#include "runtime/reduce/gloo_reduce.h"
#include "runtime/reduce/reduce.h"
#include "runtime/reduce/shm_reduce.h"

namespace hvdrun::runtime {

namespace {

// gloo::Context with its transport context set up by us instead of by a full-mesh
// rendezvous, so pairs can be added one at a time.
class MeshContext : public gloo::Context {
 public:
  MeshContext(int my_rank, int world_size, std::shared_ptr<gloo::transport::Device> dev,
              std::chrono::milliseconds timeout)
      : gloo::Context(my_rank, world_size) {
    setTimeout(timeout);
    device_ = std::move(dev);
    transportContext_ = device_->createContext(my_rank, world_size);
    transportContext_->setTimeout(timeout);
  }
  gloo::transport::Context& transport() { return *transportContext_; }
};

// Gloo's rule for which end of a pair dials: the end with the larger address.
bool dials(const std::vector<char>& self, const std::vector<char>& peer) {
  gloo::transport::tcp::Address a(self), b(peer);
  const auto& sa = a.getSockaddr();
  const auto& sb = b.getSockaddr();
  int rv;
  if (sa.ss_family == AF_INET) {
    auto* x = reinterpret_cast<const sockaddr_in*>(&sa);
    auto* y = reinterpret_cast<const sockaddr_in*>(&sb);
    rv = std::memcmp(&x->sin_addr, &y->sin_addr, sizeof(in_addr));
    if (rv == 0) rv = int(x->sin_port) - int(y->sin_port);
  } else {
    auto* x = reinterpret_cast<const sockaddr_in6*>(&sa);
    auto* y = reinterpret_cast<const sockaddr_in6*>(&sb);
    rv = std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(in6_addr));
    if (rv == 0) rv = int(x->sin6_port) - int(y->sin6_port);
  }
  return rv > 0;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size() && i < 32; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) s += " and " + std::to_string(ranks.size() - 32) + " more";
  return s;
}

// Slots of the pair authentication's buffers: far above those Gloo's algorithms take from
// the context (counting up from 0), and freed before any algorithm runs.
constexpr int kNonceSlot = INT_MAX - 1;
constexpr int kProofSlot = INT_MAX - 2;
constexpr int kDoneSlot = INT_MAX - 3;

}  // namespace

class GlooComm::Impl {
 public:
  Impl(rendezvous::Store& store, std::string prefix, int rank, int size,
       const std::string& local_ip, const std::string& secret, std::chrono::milliseconds op_timeout,
       std::chrono::milliseconds connect_timeout)
      : store_(store),
        prefix_(std::move(prefix)),
        rank_(rank),
        size_(size),
        connect_timeout_(connect_timeout),
        pair_key_(secret) {
    if (size_ >= 2 && secret.empty())
      throw Error("gloo: rank " + std::to_string(rank) +
                  ": no job secret to authenticate its pairs with (HVDRUN_SECRET)");
    if (size_ < 2) return;
    gloo::transport::tcp::attr attr;
    attr.hostname = local_ip;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw Error("gloo: cannot create a TCP device on " + local_ip + " (rank " +
                  std::to_string(rank) + "): " + e.what());
    }
    async_.ctx = std::make_shared<MeshContext>(rank, size, device_, op_timeout);
    async_.connected.assign(static_cast<std::size_t>(size), false);
    if (size_ <= kFullMeshMaxRanks) {
      sync_.ctx = std::make_shared<MeshContext>(rank, size, device_, op_timeout);
      sync_.connected.assign(static_cast<std::size_t>(size), false);
      sync_.tag = "s";
      sync_.sync = true;
    }
  }

  // Two sets of pairs over the same device. Large messages use `async_`: Gloo's event
  // loop reads while the caller computes, so ranks that all send at once never block
  // each other. Small messages (at most kSmallAllreduceBytes, up to kFullMeshMaxRanks
  // ranks) use `sync_`: the calling thread reads its own socket, one wake-up per message
  // instead of two, and no event loop spinning; safe because every algorithm on it is
  // built behind a barrier (so its buffers exist before any data arrives) and its
  // messages fit in the socket buffers.
  struct Mesh {
    std::shared_ptr<MeshContext> ctx;
    std::vector<bool> connected;
    const char* tag = "a";
    bool sync = false;
  };

  std::string key(const Mesh& m, int from, int to) const {
    return (rendezvous::Key(prefix_) / "addr" / m.tag / from / to).str();
  }

  // Every rank has built its buffers for the algorithm just constructed (sync mesh).
  void built_barrier() {
    const long long k = ++built_seq_;
    const rendezvous::Key base = rendezvous::Key(prefix_) / "built";
    const rendezvous::Key key = base / std::to_string(k);
    if (store_.add(key, 1) == size_) {
      store_.set(key / "done", "1");
      // Every rank has passed barrier k-1 (they all arrived here): drop its keys.
      if (k > 1) {
        store_.erase(base / std::to_string(k - 1));
        store_.erase(base / std::to_string(k - 1) / "done");
      }
    }
    auto missing = wait_for({(key / "done").str()});
    if (!missing.empty())
      throw Error("gloo: rank " + std::to_string(rank_) +
                  ": waiting for every rank to set up a collective: not all arrived within " +
                  std::to_string(connect_timeout_.count() / 1000) + " s");
  }

  // The store's wait_for, in slices when a failure key is set: a peer that failed and
  // published why (before it could publish what this rank waits for) ends the wait
  // with its reason instead of the whole connect timeout.
  std::vector<std::string> wait_for(const std::vector<std::string>& keys) {
    return rendezvous::wait_for_unless_failed(
        store_, keys, connect_timeout_, failure_key_, [this](const std::string& why) {
          throw Error("gloo: rank " + std::to_string(rank_) +
                      " stopped waiting for its peers: a rank failed first: " + why + ". " +
                      std::string(kPeerLossSentence));
        });
  }

  void ensure(Mesh& m, std::vector<int> peers) {
    std::vector<int> fresh;
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    for (int p : peers)
      if (p != rank_ && !m.connected[static_cast<std::size_t>(p)]) fresh.push_back(p);
    if (fresh.empty()) return;

    std::vector<std::pair<std::string, std::string>> mine;
    std::vector<std::vector<char>> self_addr;
    std::vector<PairAuth> auth(fresh.size());  // sized once: its elements never move
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      auto& pair = m.ctx->transport().createPair(fresh[i]);
      // Registered before the pair connects: whatever arrives first finds its buffer.
      auth[i].open(*pair);
      auto bytes = pair->address().bytes();
      mine.emplace_back(key(m, rank_, fresh[i]), std::string(bytes.begin(), bytes.end()));
      self_addr.push_back(std::move(bytes));
    }
    store_.multi_set(mine);

    std::vector<std::string> theirs;
    for (int p : fresh) theirs.push_back(key(m, p, rank_));
    auto missing = wait_for(theirs);
    if (!missing.empty()) {
      std::vector<int> late;
      for (std::size_t i = 0; i < fresh.size(); ++i)
        if (std::find(missing.begin(), missing.end(), theirs[i]) != missing.end())
          late.push_back(fresh[i]);
      throw Error("gloo: rank " + std::to_string(rank_) + " could not connect to rank(s) " +
                  rank_list(late) + ": they did not publish their addresses within " +
                  std::to_string(connect_timeout_.count() / 1000) +
                  " s (they may have crashed, or be stuck before this collective)");
    }
    auto values = store_.multi_get(theirs);

    // Phase 1: pairs this rank dials; phase 2: pairs it accepts (see the file comment).
    for (int phase = 0; phase < 2; ++phase) {
      for (std::size_t i = 0; i < fresh.size(); ++i) {
        if (!values[i])
          throw Error("gloo: address of rank " + std::to_string(fresh[i]) +
                      " vanished from the rendezvous store");
        std::vector<char> peer(values[i]->begin(), values[i]->end());
        if (dials(self_addr[i], peer) != (phase == 0)) continue;
        try {
          m.ctx->transport().getPair(fresh[i])->connect(peer);
        } catch (const std::exception& e) {
          throw Error("gloo: rank " + std::to_string(rank_) + " could not connect to rank " +
                      std::to_string(fresh[i]) + ": " + e.what());
        }
      }
    }
    authenticate(m, fresh, auth);
    for (int p : fresh) {
      if (m.sync) m.ctx->transport().getPair(p)->setSync(true, false);
      m.connected[static_cast<std::size_t>(p)] = true;
    }
  }

  // One pair's authentication buffers: this end's nonce and proof out, the peer's in.
  struct PairAuth {
    using Bytes = std::array<char, rendezvous::kMacBytes>;
    Bytes my_nonce{}, my_proof{}, their_nonce{}, their_proof{};
    char my_done = 1, their_done = 0;  // "I have every proof": the last step, a barrier
    std::unique_ptr<gloo::transport::Buffer> nonce_in, proof_in, nonce_out, proof_out, done_in,
        done_out;

    // The buffers point into this object: it stays where it is until they are gone.
    PairAuth() {
      const std::string n = rendezvous::random_bytes(my_nonce.size());
      std::copy(n.begin(), n.end(), my_nonce.begin());
    }
    PairAuth(const PairAuth&) = delete;
    PairAuth& operator=(const PairAuth&) = delete;

    void open(gloo::transport::Pair& pair) {
      nonce_in = pair.createRecvBuffer(kNonceSlot, their_nonce.data(), their_nonce.size());
      proof_in = pair.createRecvBuffer(kProofSlot, their_proof.data(), their_proof.size());
      nonce_out = pair.createSendBuffer(kNonceSlot, my_nonce.data(), my_nonce.size());
      proof_out = pair.createSendBuffer(kProofSlot, my_proof.data(), my_proof.size());
      done_in = pair.createRecvBuffer(kDoneSlot, &their_done, 1);
      done_out = pair.createSendBuffer(kDoneSlot, &my_done, 1);
    }
    static std::string_view view(const Bytes& b) { return {b.data(), b.size()}; }
  };

  // What `from` proves to `to` on this mesh: it holds the secret and saw both nonces.
  std::string proof(const Mesh& m, int from, int to, std::string_view from_nonce,
                    std::string_view to_nonce) const {
    const auto t = pair_key_.tag({"hvdrun-gloo-pair", prefix_, m.tag, std::to_string(from),
                                  std::to_string(to), from_nonce, to_nonce});
    return std::string(reinterpret_cast<const char*>(t.data()), t.size());
  }

  // Both ends of every fresh pair prove the job secret before the pair is used: nonces
  // both ways, then proofs both ways. Each step is posted on every pair before any wait,
  // so no order of ranks can deadlock.
  void authenticate(const Mesh& m, const std::vector<int>& fresh, std::vector<PairAuth>& auth) {
    const auto failed = [&](std::size_t i, const std::string& why) {
      return Error("gloo: rank " + std::to_string(rank_) + "'s connection for rank " +
                   std::to_string(fresh[i]) + " " + why + ": something other than rank " +
                   std::to_string(fresh[i]) +
                   " of this job is at the other end (another process reached its port "
                   "first?); the pair is not used (docs/security.md)");
    };
    try {
      for (auto& a : auth) a.nonce_out->send();
      for (std::size_t i = 0; i < auth.size(); ++i) {
        try {
          auth[i].nonce_in->waitRecv();
        } catch (const std::exception& e) {
          throw failed(i, std::string("sent no nonce (") + e.what() + ")");
        }
        auto& a = auth[i];
        const std::string mine =
            proof(m, rank_, fresh[i], PairAuth::view(a.my_nonce), PairAuth::view(a.their_nonce));
        std::copy(mine.begin(), mine.end(), a.my_proof.begin());
      }
      for (auto& a : auth) a.proof_out->send();
      // Every pair is checked, and every proof this rank sent delivered, before a refusal
      // is raised: a rank that throws at its first bad peer would close its pairs to good
      // peers too, and they would blame it for a proof it had sent.
      constexpr std::size_t kNone = static_cast<std::size_t>(-1);
      std::size_t refused = kNone;  // the first pair whose proof was wrong
      std::size_t closed = kNone;   // the first pair that sent none
      std::string closed_why;
      for (std::size_t i = 0; i < auth.size(); ++i) {
        try {
          auth[i].proof_in->waitRecv();
        } catch (const std::exception& e) {
          if (closed == kNone) {
            closed = i;
            closed_why = e.what();
          }
          continue;
        }
        const std::string want = proof(m, fresh[i], rank_, PairAuth::view(auth[i].their_nonce),
                                       PairAuth::view(auth[i].my_nonce));
        if (refused == kNone &&
            !rendezvous::tags_equal(
                reinterpret_cast<const unsigned char*>(want.data()),
                reinterpret_cast<const unsigned char*>(auth[i].their_proof.data())))
          refused = i;
      }
      // Then every rank says it has read every proof and waits until its peers have said
      // so too: a rank that goes on to refuse a peer closes its pairs only once no honest
      // peer still reads from it (a closed pair can lose what was sent on it last).
      for (auto& a : auth) {
        try {
          a.done_out->send();
        } catch (const std::exception&) {
          if (refused == kNone && closed == kNone) throw;  // else reported below
        }
      }
      for (auto& a : auth) {
        try {
          a.done_in->waitRecv();
          a.nonce_out->waitSend();
          a.proof_out->waitSend();
          a.done_out->waitSend();
        } catch (const std::exception&) {
          if (refused == kNone && closed == kNone) throw;  // else reported below
        }
      }
      if (refused != kNone) throw failed(refused, "did not prove the job secret");
      if (closed != kNone)
        throw failed(closed, "sent no proof of the job secret (" + closed_why + ")");
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("gloo: rank " + std::to_string(rank_) +
                  ": authenticating its pairs: " + e.what());
    }
  }

  void connect(Topology t, int root) { connect(async_, t, root); }

  void connect(Mesh& m, Topology t, int root) {
    std::vector<int> peers;
    switch (t) {
      case Topology::kRing:
        peers = {(rank_ + 1) % size_, (rank_ + size_ - 1) % size_};
        break;
      case Topology::kStar:
        if (rank_ == root) {
          for (int i = 0; i < size_; ++i) peers.push_back(i);
        } else {
          peers = {root};
        }
        break;
      case Topology::kFullMesh:
        for (int i = 0; i < size_; ++i) peers.push_back(i);
        break;
    }
    ensure(m, std::move(peers));
  }

  // Gloo algorithms register their buffers when constructed, and a peer's data that
  // arrives before the matching buffer is registered makes Gloo's event loop spin until
  // it is; per call, that costs milliseconds on a busy host. So algorithms are built
  // once per shape (kind, dtype, op, count, root) over buffers owned here, kept in an
  // LRU, and reused: data is copied in and out. The cache evolves identically on every
  // rank because every rank makes the same calls in the same order, so slot numbers
  // stay in step. Messages above kCacheMaxBytes run on the caller's buffer instead.
  struct Entry {
    std::string key;
    std::vector<char> buf;
    std::vector<char> out;
    std::unique_ptr<gloo::Algorithm> algo;
  };
  static constexpr std::size_t kCacheMaxBytes = 16u << 20;
  static constexpr std::size_t kCacheBudget = 128u << 20;
  static constexpr std::size_t kCacheEntries = 64;

  Entry& cached(const std::string& key, std::size_t buf_bytes, std::size_t out_bytes,
                const std::function<std::unique_ptr<gloo::Algorithm>(Entry&)>& make) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return lru_.front();
    }
    while (!lru_.empty() &&
           (lru_.size() >= kCacheEntries || cache_bytes_ + buf_bytes + out_bytes > kCacheBudget)) {
      cache_bytes_ -= lru_.back().buf.size() + lru_.back().out.size();
      index_.erase(lru_.back().key);
      lru_.pop_back();
    }
    lru_.push_front(
        Entry{key, std::vector<char>(buf_bytes), std::vector<char>(out_bytes), nullptr});
    auto& e = lru_.front();
    index_[key] = lru_.begin();
    cache_bytes_ += buf_bytes + out_bytes;
    try {
      e.algo = make(e);
    } catch (...) {
      index_.erase(key);
      cache_bytes_ -= buf_bytes + out_bytes;
      lru_.pop_front();
      throw;
    }
    return e;
  }

  template <typename T>
  std::unique_ptr<gloo::Algorithm> make_allreduce(T* ptr, std::size_t count, ReduceOp op) {
    const auto* fn = gloo_reduction::reduction<T>(op);
    if (count * sizeof(T) <= small_bytes_ && sync_.ctx) {
      connect(sync_, Topology::kFullMesh, 0);
      auto algo = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(
          sync_.ctx, std::vector<T*>{ptr}, static_cast<int>(count), fn);
      built_barrier();
      return algo;
    }
    connect(async_, Topology::kRing, 0);
    return std::make_unique<gloo::AllreduceRingChunked<T>>(async_.ctx, std::vector<T*>{ptr},
                                                           static_cast<int>(count), fn);
  }

  template <typename T>
  void allreduce_typed(T* buf, std::size_t count, ReduceOp op, DataType dtype) {
    const std::size_t bytes = count * sizeof(T);
    if (size_ > 1 && count > 0) {
      if (bytes <= kCacheMaxBytes) {
        auto& e =
            cached("ar/" + std::to_string(static_cast<int>(dtype)) + "/" +
                       std::to_string(static_cast<int>(summing(op))) + "/" + std::to_string(count),
                   bytes, 0, [&](Entry& en) {
                     return make_allreduce(reinterpret_cast<T*>(en.buf.data()), count, op);
                   });
        std::memcpy(e.buf.data(), buf, bytes);
        e.algo->run();
        std::memcpy(buf, e.buf.data(), bytes);
      } else {
        constexpr std::size_t kMaxCount = (INT_MAX / 2) / sizeof(T);
        for (std::size_t off = 0; off < count; off += kMaxCount) {
          auto n = std::min(kMaxCount, count - off);
          make_allreduce(buf + off, n, op)->run();
        }
      }
    }
    finish_average(buf, count, dtype, op, size_);
  }

  void allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
    switch (dtype) {
      case DataType::kInt32:
        return allreduce_typed(static_cast<std::int32_t*>(buf), count, op, dtype);
      case DataType::kInt64:
        return allreduce_typed(static_cast<std::int64_t*>(buf), count, op, dtype);
      case DataType::kFloat32:
        return allreduce_typed(static_cast<float*>(buf), count, op, dtype);
      case DataType::kFloat64:
        return allreduce_typed(static_cast<double*>(buf), count, op, dtype);
      case DataType::kFloat16:
        return allreduce_typed(static_cast<Half*>(buf), count, op, dtype);
      case DataType::kBFloat16:
        return allreduce_typed(static_cast<BFloat16*>(buf), count, op, dtype);
      case DataType::kUInt8:
        return allreduce_typed(static_cast<std::uint8_t*>(buf), count, op, dtype);
    }
  }

  // Broadcast is never cached: BroadcastOneToAll writes straight into the receivers'
  // buffers with no flow control, so a root that runs ahead would overwrite a reused
  // buffer before a receiver has copied the previous broadcast out of it. A fresh
  // algorithm per call takes fresh slots, which Gloo holds until they are registered.
  void broadcast(void* buf, std::size_t bytes, int root) {
    if (size_ < 2 || bytes == 0) return;
    auto* p = static_cast<char*>(buf);
    connect(async_, Topology::kStar, root);
    gloo::BroadcastOneToAll<char>(async_.ctx, std::vector<char*>{p}, bytes, root).run();
  }

  void alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                 const std::vector<std::size_t>& recv_bytes) {
    if (size_ < 2) {
      if (send_bytes[0] > 0 && send != recv) std::memmove(recv, send, send_bytes[0]);
      return;
    }
    // Pairwise exchange over the full mesh: every rank sends each peer its block directly.
    connect(async_, Topology::kFullMesh, 0);
    gloo::AlltoallvOptions opts(async_.ctx);
    opts.setInput(const_cast<char*>(static_cast<const char*>(send)),  // NOLINT: Gloo only reads it
                  std::vector<std::int64_t>(send_bytes.begin(), send_bytes.end()));
    opts.setOutput(static_cast<char*>(recv),
                   std::vector<std::int64_t>(recv_bytes.begin(), recv_bytes.end()));
    gloo::alltoallv(opts);
  }

  void allgather(const void* send, void* recv, std::size_t bytes) {
    const std::size_t total = bytes * static_cast<std::size_t>(size_);
    char* own = static_cast<char*>(recv) + bytes * static_cast<std::size_t>(rank_);
    if (size_ < 2 || bytes == 0) {
      if (send != own) std::memmove(own, send, bytes);
      return;
    }
    if (bytes > INT_MAX) throw Error("allgather: more than 2 GiB per rank is not supported");
    auto make = [&](const char* in, char* out) {
      connect(async_, Topology::kRing, 0);
      return std::make_unique<gloo::AllgatherRing<char>>(async_.ctx, std::vector<const char*>{in},
                                                         out, static_cast<int>(bytes));
    };
    if (total > kCacheMaxBytes) {
      if (send != own) std::memmove(own, send, bytes);
      make(own, static_cast<char*>(recv))->run();
      return;
    }
    // AllgatherRing receives straight into `out`, with no flow control: a neighbour that
    // has finished this allgather may send the next one of the same size before this
    // rank has copied `out` away. So calls alternate between two cached algorithms. A
    // neighbour cannot get two calls ahead: finishing a call needs this rank's chunk of
    // it, which this rank sends only after it has copied out the call before.
    const bool odd = (ag_calls_[bytes]++ & 1) != 0;
    auto& e = cached("ag/" + std::to_string(bytes) + (odd ? "/1" : "/0"), bytes, total,
                     [&](Entry& en) { return make(en.buf.data(), en.out.data()); });
    std::memcpy(e.buf.data(), send, bytes);
    e.algo->run();
    std::memcpy(recv, e.out.data(), total);
  }

  // Threshold between halving-doubling and ring (HVDRUN_ALLREDUCE_SMALL_BYTES overrides
  // kSmallAllreduceBytes, for tuning).
  std::size_t small_bytes_ = [] {
    const char* v = std::getenv("HVDRUN_ALLREDUCE_SMALL_BYTES");
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : kSmallAllreduceBytes;
  }();
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t cache_bytes_ = 0;
  std::unordered_map<std::size_t, unsigned long long> ag_calls_;  // allgathers per size

  rendezvous::Store& store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds connect_timeout_;
  Mesh async_;
  Mesh sync_;
  long long built_seq_ = 0;
  std::string failure_key_;
  rendezvous::Hmac pair_key_;
  std::shared_ptr<gloo::transport::Device> device_;
};

GlooComm::GlooComm(rendezvous::Store& store, std::string prefix, int rank, int size,
                   const std::string& local_ip, const std::string& secret,
                   std::chrono::milliseconds op_timeout, std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>(store, std::move(prefix), rank, size, local_ip, secret,
                                   op_timeout, connect_timeout)) {}
GlooComm::~GlooComm() = default;

void GlooComm::allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
  impl_->allreduce(buf, count, dtype, op);
}
void GlooComm::broadcast(void* buf, std::size_t bytes, int root) {
  impl_->broadcast(buf, bytes, root);
}
void GlooComm::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->allgather(send, recv, bytes);
}
void GlooComm::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                         const std::vector<std::size_t>& recv_bytes) {
  impl_->alltoallv(send, send_bytes, recv, recv_bytes);
}
void GlooComm::connect(Topology topology, int root) {
  if (impl_->size_ > 1) impl_->connect(topology, root);
}
void GlooComm::set_failure_key(std::string key) { impl_->failure_key_ = std::move(key); }
int GlooComm::connected_pairs() const {
  int n = 0;
  for (const auto* m : {&impl_->async_, &impl_->sync_})
    for (bool c : m->connected) n += c ? 1 : 0;
  return n;
}

}  // namespace hvdrun::runtime
