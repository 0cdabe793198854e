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

#include <cstdint>
#include <string>
#include <vector>

#include "hvdrun/hvdrun.h"

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
};

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
/// received with the round, so the collective costs no second exchange.
inline constexpr std::size_t kInlineBytes = 256;

/// What one rank puts into a round.
struct Window {
  std::uint32_t count = 0;         ///< requests used in `requests`
  std::uint32_t inline_bytes = 0;  ///< > 0: requests[0]'s input is in `payload`
  Request requests[kWindow];
  alignas(16) unsigned char payload[kInlineBytes] = {};
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

/// One collective a round made ready, as every rank sees it.
struct Ready {
  Request request;          ///< the agreed request (of the lowest rank that submitted it)
  std::vector<int> absent;  ///< joined ranks that did not submit it (they stand in)
  std::string error;        ///< non-empty: the ranks disagree; every submitter fails with it
  int last_joined = -1;     ///< kJoin: the rank that joined last
  /// An allreduce whose every submitter carried its input in the round (Window::payload):
  /// the result is reduced from `table`, no data moves again.
  bool inline_data = false;
  const std::vector<Window>* table = nullptr;  ///< the round's table (valid while it runs)
};

/// The result of an allreduce with inline_data: every submitter's payload reduced in rank
/// order (joined ranks contribute nothing: the op's identity), Average divided by the
/// number of ranks. `recv` holds `count` elements of `dtype`.
void reduce_inline(const Ready& ready, void* recv, std::size_t count, DataType dtype, ReduceOp op);

/// What a round decided: the collectives to run now, in this order, on every rank.
struct Plan {
  std::vector<Ready> ready;
};

/// Per-job state plan() keeps between rounds: in which round each rank was first seen
/// joined, so join() can say which rank joined last.
struct JoinBook {
  std::vector<long long> joined_round;  ///< -1: not joined
  long long round = 0;                  ///< rounds planned so far
};

/// Decides a round. `windows` has one entry per rank, in rank order. The same input gives
/// the same Plan on every rank.
Plan plan(const std::vector<Window>& windows, JoinBook& book);

}  // namespace hvdrun::runtime
