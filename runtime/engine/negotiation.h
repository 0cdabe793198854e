// Negotiation: how the ranks agree on each collective before any data moves.
//
// Every collective a rank submits becomes a Request: what it is (kind, element type and
// count, the caller's shape and type name, op, root, pre/postscale, device) and how it is
// matched. A named collective matches the request of the same name on every other rank,
// whatever order the ranks submitted them in (as Horovod matches by name); an unnamed one
// matches by its position among the rank's unnamed collectives. The engine puts the head
// of its queue (up to kWindow requests) into a round: one small allgather of every rank's
// window. Every rank then runs plan() on the same table and gets the same answer: which
// collectives are ready (submitted by every rank that has not joined), in which order to
// run them, and which of them fail because the ranks disagree about them. A disagreement
// is an error on every rank that submitted the collective, never a wrong result, and the
// job goes on.
//
// plan() is a pure function of the table, so it is tested without any transport.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "hvdrun/hvdrun.h"
#include "runtime/reduce/shm_reduce.h"

namespace hvdrun::runtime {

/// What a collective is.
enum class Kind : std::uint8_t {
  kNone = 0,
  kAllreduce = 1,
  kBroadcast = 2,
  kAllgather = 3,
  kBarrier = 4,
  kJoin = 5,      ///< this rank has no more work; stands in for the others' collectives
  kShutdown = 6,  ///< this rank leaves; completes once every rank has asked to
  kAlltoall = 7,
  kReducescatter = 8,
};

/// A join or a shutdown: what a rank announces about itself rather than a collective.
inline bool is_control(Kind k) { return k == Kind::kJoin || k == Kind::kShutdown; }

/// Name of a kind, as messages print it ("allreduce").
const char* kind_name(Kind k);

/// Most dimensions a Request records; a tensor with more has its trailing ones folded
/// into the last recorded one (the checks stay exact, the message shows fewer dims).
inline constexpr int kMaxDims = 8;
/// Characters of a name kept for messages (the whole name is matched through its hash).
inline constexpr std::size_t kNameChars = 47;
/// Characters of a type name ("float32", "int8").
inline constexpr std::size_t kTypeChars = 15;

/// One submitted collective as it travels in a round: fixed size, trivially copyable,
/// the same layout on every rank of a job (one build of the library).
struct Request {
  Kind kind = Kind::kNone;
  std::uint8_t dtype = 0;   ///< hvdrun::DataType of the elements moved
  std::uint8_t op = 0;      ///< hvdrun::ReduceOp (allreduce)
  std::uint8_t device = 0;  ///< 1: device memory (NCCL), 0: host memory
  std::int32_t root = -1;   ///< broadcast root
  std::uint64_t count = 0;  ///< elements moved (per rank for allgather)
  /// Position among this rank's unnamed collectives, or -1 when named.
  std::int64_t seq = -1;
  std::uint64_t name_hash = 0;  ///< hash of the whole name (0 when unnamed)
  double prescale = 1.0;
  double postscale = 1.0;
  std::int64_t shape[kMaxDims] = {};  ///< the caller's shape (default: [count])
  std::uint8_t ndim = 0;
  char type_name[kTypeChars] = {};  ///< the caller's element type ("" = dtype's name)
  char name[kNameChars + 1] = {};   ///< the name, cut at kNameChars
};

/// Requests per rank in one round: the head of each rank's queue. Collectives deeper in
/// a queue wait for a later round; a rank with more than this many collectives
/// outstanding, in an order other ranks do not share, can stall on one of them (the
/// stall inspector names it).
inline constexpr int kWindow = 8;

/// Bytes of input a small host allreduce at the head of a window carries in the round
/// itself: when every rank's head is that allreduce, each rank reduces the inputs it
/// received with the round, so the collective costs no second exchange. kInlineBytes is
/// the limit where a round crosses hosts (whole blocks move, so every byte of the limit
/// travels in every round); kInlineBytesLocal where every rank of the collective is on one
/// host and the round moves only the bytes each rank used (a block's unused payload costs
/// nothing there). The engine's limit is one of the two, the same on every rank.
inline constexpr std::size_t kInlineBytes = 256;
inline constexpr std::size_t kInlineBytesLocal = 4096;
/// Room for an inline payload in a Window or Brief: the larger limit.
inline constexpr std::size_t kInlineCapacity = kInlineBytesLocal;

/// What one rank puts into a round.
struct Window {
  std::uint32_t count = 0;         ///< requests used in `requests`
  std::uint32_t inline_bytes = 0;  ///< > 0: requests[0]'s input is in `payload`
  Request requests[kWindow];
  alignas(16) unsigned char payload[kInlineCapacity] = {};

  /// The bytes of a window that carry anything when the payload is at most `limit`.
  static constexpr std::size_t block(std::size_t limit) {
    return offsetof(Window, payload) + limit;
  }
};

/// Builds a request. `shape` null (or ndim 0) means [count]; `name` null or "" means
/// unnamed (seq is then the caller's to fill); `type_name` null means dtype's own name.
Request make_request(Kind kind, std::size_t count, DataType dtype, const char* name,
                     const std::int64_t* shape, int ndim, const char* type_name);

/// True when `a` and `b` are the same collective for matching purposes (same name, or
/// both unnamed at the same position; join and shutdown match their own kind).
bool same_key(const Request& a, const Request& b);

/// "allreduce 'grad.fc1'" or "allreduce #12" (unnamed: its position), for messages.
std::string label(const Request& r);

/// "float32[10, 3]" (the caller's type and shape), "uint8[40]" without them.
std::string tensor_text(const Request& r);
/// The two halves of tensor_text(): "float32" and "[10, 3]" ("" for no tensor).
std::string tensor_type(const Request& r);
std::string tensor_shape(const Request& r);

/// One collective a round made ready, as every rank sees it.
struct Ready {
  Request request;          ///< the agreed request (of the lowest rank that submitted it)
  std::vector<int> absent;  ///< joined ranks that did not submit it (they stand in)
  std::string error;        ///< non-empty: the ranks disagree; every submitter fails with it
  int last_joined = -1;     ///< kJoin: the rank that joined last
  /// An allreduce whose every submitter carried its input in the round (Window::payload):
  /// the result is reduced from the round's payloads, no data moves again.
  bool inline_data = false;
  /// inline_data: rank r's input is at inline_base + r * inline_stride (the round's
  /// windows or briefs, valid while the collective runs); `ranks` of them.
  const unsigned char* inline_base = nullptr;
  std::size_t inline_stride = 0;
  int ranks = 0;
};

/// The result of an allreduce with inline_data: every submitter's payload reduced in rank
/// order (joined ranks contribute nothing: the op's identity), Average divided by the
/// number of ranks. `recv` holds `count` elements of `dtype`.
void reduce_inline(const Ready& ready, void* recv, std::size_t count, DataType dtype, ReduceOp op);
/// The same for `ranks` inputs at `base`, `stride` apart, none absent.
void reduce_payloads(const unsigned char* base, std::size_t stride, int ranks, void* recv,
                     std::size_t count, DataType dtype, ReduceOp op);

/// A few values (at most 8 of T) summed rank by rank from `ranks` payloads at `base`,
/// `stride` apart, in rank order: the same additions, so the same bits, as reduce_into's
/// vector loops, without their set-up (a loss or a metric is one float). False, and
/// nothing written, for more than 8.
template <typename T>
bool sum_few(const unsigned char* base, std::size_t stride, int ranks, void* recv,
             std::size_t count) {
  if (count > 8) return false;
  auto* out = static_cast<unsigned char*>(recv);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = i * sizeof(T);
    T acc;
    std::memcpy(&acc, base + at, sizeof acc);  // one load: payloads need no alignment
    for (int r = 1; r < ranks; ++r) {
      T x;
      std::memcpy(&x, base + static_cast<std::size_t>(r) * stride + at, sizeof x);
      acc += x;
    }
    std::memcpy(out + at, &acc, sizeof acc);
  }
  return true;
}

/// reduce_payloads(), with a float32 Sum of one or two elements done in the caller.
inline void reduce_payloads_here(const unsigned char* base, std::size_t stride, int ranks,
                                 void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  if (dtype == DataType::kFloat32 && op == ReduceOp::kSum && count <= 2)
    sum_few<float>(base, stride, ranks, recv, count);
  else
    reduce_payloads(base, stride, ranks, recv, count, dtype, op);
}

/// What a round decided: the collectives to run now, in this order, on every rank.
struct Plan {
  std::vector<Ready> ready;
};

/// Per-job state plan() keeps between rounds, the same on every rank (every rank plans
/// the same tables): what each rank has announced and not yet run (a rank announces each
/// collective once, in the first round with room for it, so a collective deep in one
/// rank's queue still meets its partners however the ranks' queues are ordered), which
/// ranks have joined (from which round, so join() can say which rank joined last) and
/// which have asked to shut down.
struct JoinBook {
  std::vector<std::vector<Request>> announced;  ///< per rank, in announcement order
  std::vector<long long> joined_round;          ///< -1: not joined
  std::vector<bool> leaving;                    ///< asked to shut down
  long long round = 0;                          ///< rounds planned so far
};

/// Decides a round. `windows` has one entry per rank, in rank order. The same input gives
/// the same Plan on every rank.
Plan plan(const std::vector<Window>& windows, JoinBook& book);

// The steady state: training submits the same collectives every step, so every rank keeps
// a cache of the requests earlier rounds agreed on, identical on every rank because every
// rank learns from the same tables in the same order (Horovod's response cache plays this
// part). A round starts with a Brief from each rank: its window as cache ids (and each
// request's position), plus the inline payload. When every rank's requests are all cached,
// the briefs alone rebuild every window and the round is planned from them; otherwise a
// full exchange of windows follows, on every rank alike (each sees every brief).

/// Most distinct requests the cache holds; when full it starts again empty (at the same
/// round on every rank).
inline constexpr std::size_t kCacheCapacity = 1024;

/// One request of a Brief.
struct BriefEntry {
  std::uint32_t id = 0;  ///< index into the RequestCache
  std::uint32_t reserved = 0;
  std::int64_t seq = -1;  ///< the request's position (its only per-call field)
};

/// What one rank puts into a round first: its window as cache ids. Packed: the payload
/// follows the `count` entries in `body`, so a brief's first bytes() are all of it and only
/// those cross the transport (the steady state's brief, one entry and 8 bytes of payload,
/// is 40 bytes: one cache line instead of the whole struct's seven).
struct Brief {
  std::uint32_t count = 0;         ///< entries used (at most kWindow)
  std::uint32_t uncached = 0;      ///< 1: some request is not in the cache: windows follow
  std::uint32_t inline_bytes = 0;  ///< as Window::inline_bytes (at most kInlineCapacity)
  /// 1: this rank's one collective carries the round in its data's first step (Engine::Lead),
  /// whose data goes on only when every brief says so.
  std::uint32_t led = 0;
  /// entries[0, count) as BriefEntry, then inline_bytes of payload.
  alignas(16) unsigned char body[kWindow * sizeof(BriefEntry) + kInlineCapacity] = {};

  /// The bytes of any brief whose payload is at most `limit` (the block a round moves).
  static constexpr std::size_t block(std::size_t limit);

  BriefEntry entry(std::uint32_t i) const {
    BriefEntry e;
    std::memcpy(&e, body + i * sizeof(BriefEntry), sizeof e);
    return e;
  }
  void set_entry(std::uint32_t i, const BriefEntry& e) {
    std::memcpy(body + i * sizeof(BriefEntry), &e, sizeof e);
  }
  /// The inline payload: right after the entries (count must be set first).
  const unsigned char* payload() const { return body + clamped_count() * sizeof(BriefEntry); }
  unsigned char* payload() { return body + clamped_count() * sizeof(BriefEntry); }
  /// The bytes of this brief that carry anything: the header, the entries, the payload.
  std::size_t bytes() const {
    return offsetof(Brief, body) + clamped_count() * sizeof(BriefEntry) +
           std::min<std::size_t>(inline_bytes, kInlineCapacity);
  }

 private:
  std::size_t clamped_count() const { return std::min<std::size_t>(count, kWindow); }
};
static_assert(offsetof(Brief, body) == 16 && sizeof(BriefEntry) == 16);
constexpr std::size_t Brief::block(std::size_t limit) {
  return offsetof(Brief, body) + kWindow * sizeof(BriefEntry) + limit;
}
static_assert(Brief::block(kInlineCapacity) == sizeof(Brief));
static_assert(Window::block(kInlineCapacity) == sizeof(Window));

/// The requests earlier rounds agreed on, by id. Pure: the same calls give the same ids on
/// every rank.
class RequestCache {
 public:
  explicit RequestCache(std::size_t capacity = kCacheCapacity) : capacity_(capacity) {}
  /// The id of a cached request identical to `r` (its seq aside), or -1.
  std::int64_t find(const Request& r) const;
  /// The cached request `id` (its seq is -1).
  const Request& at(std::uint32_t id) const { return entries_[id]; }
  std::size_t size() const { return entries_.size(); }
  /// How many times the cache started again empty (an id is valid only in its epoch).
  std::uint64_t epoch() const { return epoch_; }
  /// Learns from a round decided from whole windows: every rank's request for a
  /// collective that ran without disagreement, and every join and shutdown.
  void learn(const std::vector<Window>& windows, const Plan& plan);

 private:
  void add(const Request& r);
  std::size_t capacity_;
  mutable std::uint32_t last_ = 0;  // the last id found: training repeats one request
  std::uint64_t epoch_ = 0;
  std::vector<Request> entries_;
  std::unordered_map<std::uint64_t, std::uint32_t> by_digest_;
};

/// This rank's brief for `window` (the payload included).
void brief_of(const Window& window, const RequestCache& cache, Brief& out);

/// True when any brief has a request the cache lacks (the round needs whole windows).
bool needs_windows(const std::vector<Brief>& briefs);

/// The steady-state decision, the one every path into a round takes: true when every
/// rank's brief announces the same single cached collective (neither a join nor a shutdown)
/// at the same position. The round is then ready without plan(): plan_steady() builds its
/// Plan, or a blocking small allreduce reduces the briefs' payloads itself. Counts the
/// round in `book` when true; returns false and leaves it alone otherwise, and for no
/// briefs or a book no round has sized yet (plan() sizes it).
///
/// `mine`: this rank's own brief (its copy among `briefs`), when the caller knows it
/// announces one cached collective that is neither a join nor a shutdown. The round is then
/// accepted only when every brief is `mine` up to its payload (header and entry), byte for
/// byte: no cache lookup, and every rank still decides alike. Whatever it accepts is
/// accepted without `mine` too; a round it refuses may still be steady without `mine`
/// (inputs carried by some ranks only), so its caller goes on to a round that decides again
/// without it.
bool agreed_steady(const std::vector<Brief>& briefs, const RequestCache& cache, JoinBook& book,
                   const Brief* mine = nullptr);

/// The Plan for a round agreed_steady() accepted: its one collective ready and agreed, with
/// inline_data when every rank carried its input (a host allreduce whose every brief has
/// exactly its bytes inline; with agreed_steady()'s `mine`, when mine.inline_bytes > 0).
/// Reuses `out`'s first Ready rather than building a new one.
void plan_steady(const std::vector<Brief>& briefs, const RequestCache& cache, Plan& out);

/// Rebuilds every rank's window from briefs that are all cached.
void expand(const std::vector<Brief>& briefs, const RequestCache& cache,
            std::vector<Window>& windows);

}  // namespace hvdrun::runtime
