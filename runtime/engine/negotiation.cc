// Negotiation (see negotiation.h): requests, their text, and the planning of a round (the
// request cache, the briefs and the steady state: negotiation_briefs.cc).
#include "runtime/engine/negotiation.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "runtime/reduce/shm_reduce.h"

namespace hvdrun::runtime {

namespace {

std::uint64_t fnv1a(const char* s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (; *s != '\0'; ++s) {
    h ^= static_cast<unsigned char>(*s);
    h *= 1099511628211ULL;
  }
  return h == 0 ? 1 : h;  // 0 means unnamed
}

const char* dtype_text(std::uint8_t t) {
  static const char* const names[] = {"int32",   "int64",    "float32", "float64",
                                      "float16", "bfloat16", "uint8"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

const char* op_text(std::uint8_t op) {
  static const char* const names[] = {"Sum", "Average", "Min", "Max", "Product"};
  return op < sizeof(names) / sizeof(names[0]) ? names[op] : "?";
}

std::string type_of(const Request& r) {
  return r.type_name[0] != '\0' ? std::string(r.type_name, strnlen(r.type_name, kTypeChars))
                                : std::string(dtype_text(r.dtype));
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) s += " and " + std::to_string(ranks.size() - 16) + " more";
  return s;
}

// Whether the shapes agree under `kind`'s rule: allgather concatenates along the first
// dimension, so only the others must match; everything else needs the same shape.
bool shapes_agree(const Request& a, const Request& b) {
  if (a.ndim != b.ndim) return false;
  const int first = a.kind == Kind::kAllgather || a.kind == Kind::kAlltoall ? 1 : 0;
  for (int d = first; d < a.ndim && d < kMaxDims; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  return true;
}

// True when two ranks' requests for one collective agree (the cheap check every round
// makes; difference() then says what differs).
bool agree(const Request& a, const Request& b) {
  if (a.kind != b.kind || a.device != b.device || a.dtype != b.dtype) return false;
  if (a.kind == Kind::kBarrier || is_control(a.kind)) return true;
  const bool per_rank = a.kind == Kind::kAllgather || a.kind == Kind::kAlltoall;
  if ((!per_rank && a.count != b.count) || !shapes_agree(a, b) ||
      std::strncmp(a.type_name, b.type_name, kTypeChars) != 0)
    return false;
  if (a.kind == Kind::kAllreduce || a.kind == Kind::kReducescatter)
    return a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale;
  return a.kind != Kind::kBroadcast || a.root == b.root;
}

// What differs between two ranks' requests for one collective, or "" when they agree.
std::string difference(const Request& a, int ra, const Request& b, int rb) {
  if (agree(a, b)) return {};
  const std::string A = "rank " + std::to_string(ra);
  const std::string B = "rank " + std::to_string(rb);
  std::ostringstream s;
  if (a.kind != b.kind) {
    s << A << " submitted " << kind_name(a.kind) << " " << tensor_text(a) << ", " << B
      << " submitted " << kind_name(b.kind) << " " << tensor_text(b);
    if (a.seq >= 0) s << ". Every rank must submit its unnamed collectives in the same order";
    return s.str();
  }
  if (a.device != b.device) {
    s << A << " has a " << (a.device ? "GPU" : "CPU") << " tensor, " << B << " a "
      << (b.device ? "GPU" : "CPU") << " one";
    return s.str();
  }
  const bool sized = a.kind != Kind::kBarrier && !is_control(a.kind);
  const bool per_rank = a.kind == Kind::kAllgather || a.kind == Kind::kAlltoall;
  if (sized && (type_of(a) != type_of(b) || a.dtype != b.dtype || !shapes_agree(a, b) ||
                (!per_rank && a.count != b.count))) {
    s << A << " has " << tensor_text(a) << ", " << B << " has " << tensor_text(b);
    if (per_rank && type_of(a) == type_of(b))
      s << " (" << kind_name(a.kind) << ": only the first dimension may differ)";
    return s.str();
  }
  if (sized && !per_rank && a.count != b.count) {
    s << A << " moves " << a.count << " " << dtype_text(a.dtype) << " elements, " << B << " moves "
      << b.count;
    return s.str();
  }
  const bool reduces = a.kind == Kind::kAllreduce || a.kind == Kind::kReducescatter;
  if (reduces && a.op != b.op) {
    s << A << " reduces with " << op_text(a.op) << ", " << B << " with " << op_text(b.op);
    return s.str();
  }
  if (reduces && (a.prescale != b.prescale || a.postscale != b.postscale)) {
    s << A << " scales by (" << a.prescale << ", " << a.postscale << "), " << B << " by ("
      << b.prescale << ", " << b.postscale << ") (prescale_factor, postscale_factor)";
    return s.str();
  }
  if (a.kind == Kind::kBroadcast && a.root != b.root) {
    s << A << " broadcasts from root " << a.root << ", " << B << " from root " << b.root;
    return s.str();
  }
  return {};
}

// The ready collective `key`: the lowest submitter's request, the joined ranks that stand
// in, and the first disagreement (or the join rule a joined rank breaks).
const Request* find(const std::vector<Request>& announced, const Request& key) {
  for (const auto& q : announced)
    if (same_key(q, key)) return &q;
  return nullptr;
}

Ready decide(const std::vector<std::vector<Request>>& announced, const Request& key) {
  Ready out;
  int first = -1;
  for (int r = 0; r < static_cast<int>(announced.size()); ++r) {
    const Request* mine = find(announced[static_cast<std::size_t>(r)], key);
    if (mine == nullptr) {
      out.absent.push_back(r);
      continue;
    }
    if (first < 0) {
      first = r;
      out.request = *mine;
      continue;
    }
    if (out.error.empty()) {
      auto diff = difference(out.request, first, *mine, r);
      if (!diff.empty()) out.error = label(out.request) + ": " + diff;
    }
  }
  if (out.error.empty() && !out.absent.empty() && out.request.kind != Kind::kAllreduce &&
      out.request.kind != Kind::kBarrier)
    out.error = label(out.request) + " cannot run while " + ranks_text(out.absent) +
                (out.absent.size() == 1 ? " has" : " have") +
                " joined: a joined rank stands in for allreduce and barrier only (as in "
                "Horovod); finish every " +
                kind_name(out.request.kind) + " before join()";
  return out;
}

}  // namespace

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "allreduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllgather:
      return "allgather";
    case Kind::kBarrier:
      return "barrier";
    case Kind::kJoin:
      return "join";
    case Kind::kShutdown:
      return "shutdown";
    case Kind::kAlltoall:
      return "alltoall";
    case Kind::kReducescatter:
      return "reducescatter";
    case Kind::kNone:
      break;
  }
  return "nothing";
}

Request make_request(Kind kind, std::size_t count, DataType dtype, const char* name,
                     const std::int64_t* shape, int ndim, const char* type_name) {
  Request r;
  r.kind = kind;
  r.count = count;
  r.dtype = static_cast<std::uint8_t>(dtype);
  if (name != nullptr && *name != '\0') {
    r.name_hash = fnv1a(name);
    std::strncpy(r.name, name, kNameChars);
  }
  if (type_name != nullptr) std::strncpy(r.type_name, type_name, kTypeChars - 1);
  if (shape == nullptr || ndim <= 0) {
    r.ndim = kind == Kind::kBarrier || is_control(kind) ? 0 : 1;
    r.shape[0] = static_cast<std::int64_t>(count);
    return r;
  }
  r.ndim = static_cast<std::uint8_t>(std::min(ndim, kMaxDims));
  for (int d = 0; d < r.ndim; ++d) r.shape[d] = shape[d];
  for (int d = kMaxDims; d < ndim; ++d) r.shape[kMaxDims - 1] *= shape[d];
  return r;
}

bool same_key(const Request& a, const Request& b) {
  if (is_control(a.kind) || is_control(b.kind)) return a.kind == b.kind;
  if (a.name_hash != 0 || b.name_hash != 0) return a.name_hash == b.name_hash;
  return a.seq == b.seq;
}

std::string label(const Request& r) {
  std::string s = kind_name(r.kind);
  if (r.name_hash != 0)
    s += " '" + std::string(r.name, strnlen(r.name, sizeof r.name)) + "'";
  else if (r.seq >= 0)
    s += " #" + std::to_string(r.seq);
  return s;
}

std::string tensor_type(const Request& r) {
  if (r.kind == Kind::kBarrier || is_control(r.kind)) return {};
  return type_of(r);
}

std::string tensor_shape(const Request& r) {
  if (r.kind == Kind::kBarrier || is_control(r.kind)) return {};
  std::string s = "[";
  for (int d = 0; d < r.ndim && d < kMaxDims; ++d)
    s += (d ? ", " : "") + std::to_string(r.shape[d]);
  return s + "]";
}

std::string tensor_text(const Request& r) {
  if (r.kind == Kind::kBarrier || is_control(r.kind)) return "(no tensor)";
  return tensor_type(r) + tensor_shape(r);
}

// True when every rank that submitted `key` has it at the head of its window with its
// input carried in the round.
bool carried_inline(const std::vector<Window>& windows, const Ready& rd) {
  const Request& key = rd.request;
  if (key.kind != Kind::kAllreduce || key.device != 0) return false;
  const std::size_t bytes = key.count * dtype_size(static_cast<DataType>(key.dtype));
  if (bytes == 0 || bytes > kInlineCapacity) return false;
  auto absent = rd.absent.begin();  // joined: contributes the identity, i.e. nothing
  for (int r = 0; r < static_cast<int>(windows.size()); ++r) {
    if (absent != rd.absent.end() && *absent == r) {
      ++absent;
      continue;
    }
    // Announced in this very round, at the head of the window, with its input.
    const Window& w = windows[static_cast<std::size_t>(r)];
    if (w.count == 0 || !same_key(w.requests[0], key) || w.inline_bytes != bytes) return false;
  }
  return true;
}

void reduce_inline(const Ready& ready, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
  if (ready.absent.empty()) {
    reduce_payloads(ready.inline_base, ready.inline_stride, ready.ranks, recv, count, dtype, op);
    return;
  }
  const std::size_t bytes = count * element_bytes(dtype);
  auto absent = ready.absent.begin();  // joined ranks: the op's identity, i.e. nothing
  bool first = true;
  for (int r = 0; r < ready.ranks; ++r) {
    if (absent != ready.absent.end() && *absent == r) {
      ++absent;
      continue;
    }
    const unsigned char* in = ready.inline_base + static_cast<std::size_t>(r) * ready.inline_stride;
    if (first)
      std::memcpy(recv, in, bytes);
    else
      reduce_into(recv, in, count, dtype, op);
    first = false;
  }
  finish_average(recv, count, dtype, op, ready.ranks);
}

void reduce_payloads(const unsigned char* base, std::size_t stride, int ranks, void* recv,
                     std::size_t count, DataType dtype, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    const bool done = dtype == DataType::kFloat32 ? sum_few<float>(base, stride, ranks, recv, count)
                      : dtype == DataType::kFloat64
                          ? sum_few<double>(base, stride, ranks, recv, count)
                          : false;
    if (done) {
      finish_average(recv, count, dtype, op, ranks);
      return;
    }
  }
  std::memcpy(recv, base, count * element_bytes(dtype));
  for (int r = 1; r < ranks; ++r)
    reduce_into(recv, base + static_cast<std::size_t>(r) * stride, count, dtype, op);
  finish_average(recv, count, dtype, op, ranks);
}

namespace {

// Points `rd` at the inline inputs of `windows` when every submitter carried one.
void take_inline(Ready& rd, const std::vector<Window>& windows) {
  rd.inline_data = rd.error.empty() && carried_inline(windows, rd);
  if (!rd.inline_data) return;
  rd.inline_base = windows[0].payload;
  rd.inline_stride = sizeof(Window);
  rd.ranks = static_cast<int>(windows.size());
}

}  // namespace

Plan plan(const std::vector<Window>& windows, JoinBook& book) {
  const int n = static_cast<int>(windows.size());
  const auto N = static_cast<std::size_t>(n);
  if (book.joined_round.size() != N) {
    book.joined_round.assign(N, -1);
    book.leaving.assign(N, false);
    book.announced.assign(N, {});
  }
  // What each rank announced this round joins what it announced before and has not run.
  bool all_joined = n > 0, all_leaving = n > 0;
  for (std::size_t r = 0; r < N; ++r) {
    const auto& w = windows[r];
    for (std::uint32_t i = 0; i < w.count && i < static_cast<std::uint32_t>(kWindow); ++i) {
      const Request& q = w.requests[i];
      if (q.kind == Kind::kJoin && book.joined_round[r] < 0) book.joined_round[r] = book.round;
      if (q.kind == Kind::kShutdown) book.leaving[r] = true;
      if (!is_control(q.kind) && find(book.announced[r], q) == nullptr)
        book.announced[r].push_back(q);
    }
    all_joined = all_joined && book.joined_round[r] >= 0;
    all_leaving = all_leaving && book.leaving[r];
  }
  ++book.round;

  Plan p;
  std::vector<Request> done;  // emitted this round, to drop from every rank's ledger
  bool left_over = false;     // a collective stays pending after this round
  for (std::size_t r = 0; r < N; ++r) {
    for (const Request& q : book.announced[r]) {
      if (std::any_of(done.begin(), done.end(), [&](const Request& e) { return same_key(e, q); }))
        continue;
      std::vector<int> gone;  // ranks leaving without it: it can never complete
      bool ready = true;
      for (std::size_t o = 0; o < N; ++o) {
        if (book.joined_round[o] >= 0 || find(book.announced[o], q) != nullptr) continue;
        ready = false;
        if (book.leaving[o]) gone.push_back(static_cast<int>(o));
      }
      if (!ready && gone.empty()) {
        left_over = true;
        continue;
      }
      Ready rd = decide(book.announced, q);
      if (!ready)
        rd.error = label(rd.request) + " can never complete: " + ranks_text(gone) +
                   " shut down without submitting it";
      take_inline(rd, windows);
      done.push_back(q);
      p.ready.push_back(std::move(rd));
    }
  }
  for (auto& mine : book.announced)
    mine.erase(std::remove_if(mine.begin(), mine.end(),
                              [&](const Request& q) {
                                return std::any_of(done.begin(), done.end(), [&](const Request& e) {
                                  return same_key(e, q);
                                });
                              }),
               mine.end());
  if (all_joined && !left_over) {
    Ready joined;
    joined.request = make_request(Kind::kJoin, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr);
    long long best = -1;
    for (int r = 0; r < n; ++r)
      if (book.joined_round[static_cast<std::size_t>(r)] >= best) {
        best = book.joined_round[static_cast<std::size_t>(r)];
        joined.last_joined = r;
      }
    book.joined_round.assign(N, -1);
    p.ready.push_back(std::move(joined));
  }
  if (all_leaving && !left_over) {
    Ready left;
    left.request = make_request(Kind::kShutdown, 0, DataType::kUInt8, nullptr, nullptr, 0, nullptr);
    book.leaving.assign(N, false);
    p.ready.push_back(std::move(left));
  }
  return p;
}

}  // namespace hvdrun::runtime
