// Negotiation's steady state (see negotiation.h): the request cache, the briefs a round
// starts with, and the one decision whether the briefs alone settle a round.
#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/engine/negotiation.h"
#include "runtime/reduce/shm_reduce.h"

namespace hvdrun::runtime {

namespace {

// `key`'s request in window `w`, or nullptr.
const Request* find(const Window& w, const Request& key) {
  for (std::uint32_t i = 0; i < w.count && i < static_cast<std::uint32_t>(kWindow); ++i)
    if (same_key(w.requests[i], key)) return &w.requests[i];
  return nullptr;
}

// A double's bits: scale factors are cached as given (-0.0 apart from 0.0).
std::uint64_t bits_of(double d) {
  std::uint64_t b = 0;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// What makes two requests the same cache entry: everything but the seq.
std::uint64_t digest(const Request& r) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  mix(static_cast<std::uint64_t>(r.kind) | static_cast<std::uint64_t>(r.dtype) << 8 |
      static_cast<std::uint64_t>(r.op) << 16 | static_cast<std::uint64_t>(r.device) << 24 |
      static_cast<std::uint64_t>(r.ndim) << 32);
  mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(r.root)));
  mix(r.count);
  mix(r.name_hash);
  mix(bits_of(r.prescale));
  mix(bits_of(r.postscale));
  for (int d = 0; d < r.ndim && d < kMaxDims; ++d) mix(static_cast<std::uint64_t>(r.shape[d]));
  for (std::size_t i = 0; i < kTypeChars && r.type_name[i] != '\0'; ++i)
    mix(static_cast<unsigned char>(r.type_name[i]));
  return h;
}

// Every field but seq, byte for byte: the request has no padding, and make_request()
// leaves every unused byte zero (the shape past ndim, each text past its end), so this is
// the field-by-field test in a few vector compares (a request built otherwise, with other
// bytes there, is merely not found: its round then sends the whole windows).
static_assert(sizeof(Request) == 176 && offsetof(Request, seq) == 16 &&
                  offsetof(Request, name_hash) == 24 && offsetof(Request, name) == 128,
              "Request has no padding: identical() compares its bytes");
bool identical(const Request& a, const Request& b) {
  constexpr std::size_t kTail = sizeof(Request) - offsetof(Request, name_hash);
  return std::memcmp(&a, &b, offsetof(Request, seq)) == 0 &&
         std::memcmp(&a.name_hash, &b.name_hash, kTail) == 0;
}

}  // namespace

std::int64_t RequestCache::find(const Request& r) const {
  if (last_ < entries_.size() && identical(entries_[last_], r)) return last_;
  auto it = by_digest_.find(digest(r));
  if (it == by_digest_.end() || !identical(entries_[it->second], r)) return -1;
  last_ = it->second;
  return it->second;
}

void RequestCache::add(const Request& r) {
  const std::uint64_t d = digest(r);
  if (by_digest_.count(d) > 0) return;  // cached, or a digest collision: stays uncached
  if (entries_.size() >= capacity_) {
    entries_.clear();
    by_digest_.clear();
    ++epoch_;
  }
  Request e = r;
  e.seq = -1;
  by_digest_.emplace(d, static_cast<std::uint32_t>(entries_.size()));
  entries_.push_back(e);
}

void RequestCache::learn(const std::vector<Window>& windows, const Plan& plan) {
  for (const auto& rd : plan.ready) {
    if (!rd.error.empty() || is_control(rd.request.kind)) continue;
    for (const auto& w : windows)
      if (const Request* q = runtime::find(w, rd.request)) add(*q);
  }
  for (const auto& w : windows)
    for (std::uint32_t i = 0; i < w.count && i < static_cast<std::uint32_t>(kWindow); ++i)
      if (is_control(w.requests[i].kind)) add(w.requests[i]);
}

void brief_of(const Window& window, const RequestCache& cache, Brief& out) {
  out.count = std::min<std::uint32_t>(window.count, static_cast<std::uint32_t>(kWindow));
  out.uncached = 0;
  out.led = 0;
  for (std::uint32_t i = 0; i < out.count; ++i) {
    const std::int64_t id = cache.find(window.requests[i]);
    BriefEntry e;
    if (id < 0) {
      out.uncached = 1;
    } else {
      e.id = static_cast<std::uint32_t>(id);
      e.seq = window.requests[i].seq;
    }
    out.set_entry(i, e);
  }
  out.inline_bytes = std::min<std::uint32_t>(window.inline_bytes, kInlineCapacity);
  if (out.inline_bytes > 0) std::memcpy(out.payload(), window.payload, out.inline_bytes);
}

namespace {

// Every brief equal to `mine` in its header and its one entry (count, uncached,
// inline_bytes, led, id and seq), compared a word at a time; the payloads may differ.
bool all_as_mine(const std::vector<Brief>& briefs, const Brief& mine) {
  constexpr std::size_t kWords = (offsetof(Brief, body) + sizeof(BriefEntry)) / 8;
  if (mine.count != 1 || mine.uncached != 0) return false;
  std::uint64_t own[kWords];
  std::memcpy(own, &mine, sizeof own);
  for (const auto& b : briefs) {
    std::uint64_t w[kWords];
    std::memcpy(w, &b, sizeof w);
    std::uint64_t differ = 0;
    for (std::size_t i = 0; i < kWords; ++i) differ |= w[i] ^ own[i];
    if (differ != 0) return false;
  }
  return true;
}

// Every brief one cached collective, the same id and seq, read against the cache: neither
// a join nor a shutdown.
bool all_alone(const std::vector<Brief>& briefs, const RequestCache& cache) {
  const Brief& first = briefs[0];
  if (first.count != 1 || first.uncached != 0) return false;
  const BriefEntry e = first.entry(0);
  if (e.id >= cache.size() || is_control(cache.at(e.id).kind)) return false;
  for (const auto& b : briefs) {
    if (b.count != 1 || b.uncached != 0) return false;
    const BriefEntry be = b.entry(0);
    if (be.id != e.id || be.seq != e.seq) return false;
  }
  return true;
}

// agreed_steady() from every brief. Out of line, so that the decision from a rank's own
// brief, which the steady state of a small allreduce takes every call, stays a function
// that calls nothing and saves no registers.
[[gnu::noinline]] bool agreed_from_all(const std::vector<Brief>& briefs, const RequestCache& cache,
                                       JoinBook& book) {
  if (briefs.empty() || book.joined_round.size() != briefs.size() || !all_alone(briefs, cache))
    return false;  // plan() sizes the book
  ++book.round;
  return true;
}

// Whether every rank carried the input of `q`, a steady round's collective, in its brief:
// a host allreduce small enough, with exactly its bytes inline in every brief.
bool carried_by_all(const std::vector<Brief>& briefs, const Request& q) {
  const std::size_t bytes = q.count * element_bytes(static_cast<DataType>(q.dtype));
  if (q.kind != Kind::kAllreduce || q.device != 0 || bytes == 0 || bytes > kInlineCapacity)
    return false;
  return std::all_of(briefs.begin(), briefs.end(),
                     [&](const Brief& b) { return b.inline_bytes == bytes; });
}

}  // namespace

bool agreed_steady(const std::vector<Brief>& briefs, const RequestCache& cache, JoinBook& book,
                   const Brief* mine) {
  if (mine == nullptr) return agreed_from_all(briefs, cache, book);
  // Accepted only when every brief is this rank's own (one of them, so there is one): then
  // the cache, read as all_alone() reads it, could only agree (the caller vouches for it).
  if (book.joined_round.size() != briefs.size() || !all_as_mine(briefs, *mine)) return false;
  ++book.round;
  return true;
}

void plan_steady(const std::vector<Brief>& briefs, const RequestCache& cache, Plan& out) {
  // The steady state reuses the last round's Ready rather than building a new one.
  out.ready.resize(1);
  Ready& rd = out.ready[0];
  rd.absent.clear();
  rd.error.clear();
  rd.last_joined = -1;
  rd.inline_data = false;
  rd.inline_base = nullptr;
  rd.inline_stride = 0;
  rd.ranks = 0;
  const BriefEntry e = briefs[0].entry(0);  // every brief's
  rd.request = cache.at(e.id);
  rd.request.seq = e.seq;
  if (carried_by_all(briefs, rd.request)) {
    rd.inline_data = true;
    // Every brief has one entry, so every payload sits at the same offset.
    rd.inline_base = briefs[0].payload();
    rd.inline_stride = sizeof(Brief);
    rd.ranks = static_cast<int>(briefs.size());
  }
}

bool needs_windows(const std::vector<Brief>& briefs) {
  return std::any_of(briefs.begin(), briefs.end(), [](const Brief& b) { return b.uncached != 0; });
}

void expand(const std::vector<Brief>& briefs, const RequestCache& cache,
            std::vector<Window>& windows) {
  windows.resize(briefs.size());
  for (std::size_t r = 0; r < briefs.size(); ++r) {
    const Brief& b = briefs[r];
    Window& w = windows[r];
    w.count = std::min<std::uint32_t>(b.count, static_cast<std::uint32_t>(kWindow));
    for (std::uint32_t i = 0; i < w.count; ++i) {
      const BriefEntry e = b.entry(i);
      if (e.id >= cache.size())
        throw Error("hvdrun: negotiation: rank " + std::to_string(r) + " named cached request " +
                    std::to_string(e.id) + " of " + std::to_string(cache.size()) +
                    ": the ranks run different builds of libhvdrun");
      w.requests[i] = cache.at(e.id);
      w.requests[i].seq = e.seq;
    }
    w.inline_bytes = std::min<std::uint32_t>(b.inline_bytes, kInlineCapacity);
    if (w.inline_bytes > 0) std::memcpy(w.payload, b.payload(), w.inline_bytes);
  }
}

}  // namespace hvdrun::runtime
