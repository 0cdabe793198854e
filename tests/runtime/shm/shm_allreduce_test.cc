// The host's allreduce in shared memory. Inputs and outputs at any offset within a page,
// each rank's its own, give the exact sum (each rank's data sits in its slots at its
// output's offset). Notes riding in an allreduce's first step (ShmComm::allreduce_agreed):
// every local rank's note reaches every rank before anything is reduced; when the ranks agree
// the result is the allreduce's, when they do not every rank returns false with its output
// untouched and the segment goes on in step; a rank exchanging its note alone
// (allgather_upto) in that step meets them. Local ranks are threads of this process, each
// with its own membership.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "runtime/shm/shm_comm.h"

using namespace std::chrono_literals;
using hvdrun::DataType;
using hvdrun::ReduceOp;
using hvdrun::runtime::ShmComm;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 3;
constexpr std::size_t kNote = 64;  // each note's block; rank r uses 8 + r bytes of it

// Runs body(comm, local_rank) on one thread per local rank of a fresh segment; returns
// each rank's failure ("" when it passed).
std::vector<std::string> run_ranks(const std::function<std::string(ShmComm&, int)>& body) {
  static int serial = 0;
  const std::string name =
      "hvdrun-test-notes-" + std::to_string(::getpid()) + "-" + std::to_string(++serial);
  std::vector<std::future<std::string>> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      try {
        hvdrun::runtime::ShmMember me;
        me.local_rank = r;
        me.local_size = kRanks;
        me.global_rank = r;
        me.global_size = kRanks;
        me.host = "localhost";
        ShmComm shm(nullptr, name, me, Clock::now() + 30s, 30s);
        const std::string e = body(shm, r);
        return e.empty() ? e : "rank " + std::to_string(r) + ": " + e;
      } catch (const std::exception& e) {
        return "rank " + std::to_string(r) + " threw: " + e.what();
      }
    }));
  std::vector<std::string> errors;
  for (auto& f : ranks) {
    REQUIRE(f.wait_for(60s) == std::future_status::ready);
    errors.push_back(f.get());
  }
  return errors;
}

void check_all(const std::vector<std::string>& errors) {
  for (const auto& e : errors)
    if (!e.empty()) FAIL_CHECK(e);
}

// Rank r's note: its first byte `mark`, then r repeated; 8 + r bytes used.
std::vector<char> note_of(int r, char mark) {
  std::vector<char> n(kNote, '?');
  n[0] = mark;
  for (std::size_t i = 1; i < 8 + static_cast<std::size_t>(r); ++i)
    n[i] = static_cast<char>('0' + r);
  return n;
}

// "" when `notes` holds every rank's note (its used bytes; the rest of each block as it
// was, '-'), marked as `marks` says.
std::string check_notes(const std::vector<char>& notes, const std::string& marks) {
  for (int l = 0; l < kRanks; ++l) {
    const auto want = note_of(l, marks[static_cast<std::size_t>(l)]);
    const std::size_t used = 8 + static_cast<std::size_t>(l);
    const char* got = notes.data() + static_cast<std::size_t>(l) * kNote;
    if (std::memcmp(got, want.data(), used) != 0) return "rank " + std::to_string(l) + "'s note";
    for (std::size_t i = used; i < kNote; ++i)
      if (got[i] != '-') return "past rank " + std::to_string(l) + "'s note";
  }
  return "";
}

// The input of rank r: r + 1 + i % 7 at i.
std::vector<float> input_of(int r, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(r + 1 + static_cast<int>(i % 7));
  return v;
}

// "" when `out` is the sum of every rank's input.
std::string check_sum(const std::vector<float>& out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    float want = 0;
    for (int r = 0; r < kRanks; ++r) want += static_cast<float>(r + 1 + static_cast<int>(i % 7));
    if (out[i] != want) return "element " + std::to_string(i) + " is " + std::to_string(out[i]);
  }
  return "";
}

// Every path: nothing to reduce (the notes take a step of their own), the small one (one
// step), one chunk, several chunks.
const std::size_t kCounts[] = {0, 3, 2048, 65536, 300000};

}  // namespace

TEST_CASE("shm notes: when the ranks agree, the notes arrive and the allreduce is whole",
          "[runtime][shm]") {
  check_all(run_ranks([](ShmComm& shm, int r) -> std::string {
    for (const std::size_t count : kCounts) {
      const auto mine = note_of(r, 'A');
      std::vector<char> notes(kNote * kRanks, '-');
      int asked = 0;
      const std::function<bool()> agreed = [&] {
        ++asked;
        return check_notes(notes, "AAA").empty();
      };
      const ShmComm::Notes n{mine.data(), 8 + static_cast<std::size_t>(r), notes.data(), kNote,
                             &agreed};
      auto in = input_of(r, count);
      std::vector<float> out(count, -1.0F);
      if (!shm.allreduce_agreed(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, 0,
                                n))
        return "count " + std::to_string(count) + ": refused though every note agreed";
      if (asked != 1) return "agreed() asked " + std::to_string(asked) + " times";
      if (auto e = check_notes(notes, "AAA"); !e.empty()) return e;
      if (auto e = check_sum(out); !e.empty()) return "count " + std::to_string(count) + ": " + e;
    }
    return "";
  }));
}

TEST_CASE("shm notes: when the ranks disagree, every rank returns false with its output untouched",
          "[runtime][shm]") {
  check_all(run_ranks([](ShmComm& shm, int r) -> std::string {
    for (const std::size_t count : kCounts) {
      // Rank 1's note is marked otherwise: every rank sees it, and every rank refuses.
      const auto mine = note_of(r, r == 1 ? 'B' : 'A');
      std::vector<char> notes(kNote * kRanks, '-');
      const std::function<bool()> agreed = [&] { return check_notes(notes, "AAA").empty(); };
      const ShmComm::Notes n{mine.data(), 8 + static_cast<std::size_t>(r), notes.data(), kNote,
                             &agreed};
      auto in = input_of(r, count);
      std::vector<float> out(count, -1.0F);
      if (shm.allreduce_agreed(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, 0,
                               n))
        return "count " + std::to_string(count) + ": went on though rank 1 disagreed";
      if (auto e = check_notes(notes, "ABA"); !e.empty()) return e;
      for (const float x : out)
        if (x != -1.0F) return "count " + std::to_string(count) + ": output written";
      // In place too: the input, which is the output, stays as it was.
      auto same = input_of(r, count);
      if (shm.allreduce_agreed(same.data(), same.data(), count, DataType::kFloat32, ReduceOp::kSum,
                               0, n) ||
          same != input_of(r, count))
        return "count " + std::to_string(count) + ": in place, the buffer changed";
      // The segment is still in step: the next allreduce is right.
      shm.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      if (auto e = check_sum(out); !e.empty()) return "after: " + e;
    }
    return "";
  }));
}

TEST_CASE("shm notes: a rank exchanging its note alone meets ranks whose notes ride with data",
          "[runtime][shm]") {
  check_all(run_ranks([](ShmComm& shm, int r) -> std::string {
    for (const std::size_t count : kCounts) {
      std::vector<char> notes(kNote * kRanks, '-');
      auto in = input_of(r, count);
      std::vector<float> out(count, -1.0F);
      if (r == 2) {
        // What the engine's exchange of a brief does: one step, the notes' place.
        const auto mine = note_of(r, 'x');
        shm.allgather_upto(mine.data(), 8 + static_cast<std::size_t>(r), notes.data(), kNote);
      } else {
        const auto mine = note_of(r, 'L');
        const std::function<bool()> agreed = [&] { return check_notes(notes, "LLL").empty(); };
        const ShmComm::Notes n{mine.data(), 8 + static_cast<std::size_t>(r), notes.data(), kNote,
                               &agreed};
        if (shm.allreduce_agreed(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum,
                                 0, n))
          return "went on though rank 2 sent no data";
        for (const float x : out)
          if (x != -1.0F) return "output written";
      }
      if (auto e = check_notes(notes, "LLx"); !e.empty()) return e;
      // Then every rank runs the allreduce itself, as the round decided.
      shm.allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      if (auto e = check_sum(out); !e.empty()) return "count " + std::to_string(count) + ": " + e;
    }
    return "";
  }));
}

TEST_CASE("shm notes: a note larger than a step carries is refused before anything moves",
          "[runtime][shm]") {
  check_all(run_ranks([](ShmComm& shm, int r) -> std::string {
    const std::size_t big = ShmComm::note_bytes() + 1;
    std::vector<char> mine(big, 'n'), notes(big * kRanks);
    const std::function<bool()> agreed = [] { return true; };
    const ShmComm::Notes n{mine.data(), big, notes.data(), big, &agreed};
    float x = 1.0F, y = 0.0F;
    try {
      (void)shm.allreduce_agreed(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum, 0, n);
      return "accepted a note of " + std::to_string(big) + " bytes";
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("does not fit") == std::string::npos)
        return std::string("unclear: ") + e.what();
    }
    // Nothing moved: the ranks are still in step.
    x = static_cast<float>(r);
    shm.allreduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum);
    return y == 3.0F ? "" : "after: " + std::to_string(y);
  }));
}

namespace {

// `bytes` bytes at `offset` past a page boundary, the rest of the storage kept as `fill`.
class Placed {
 public:
  static constexpr std::size_t kPage = 4096;
  Placed(std::size_t bytes, std::size_t offset, unsigned char fill)
      : storage_(bytes + 2 * kPage, fill), bytes_(bytes) {
    const auto a = reinterpret_cast<std::uintptr_t>(storage_.data());
    at_ = storage_.data() + ((kPage - a % kPage) % kPage) + offset;
  }
  unsigned char* get() const { return at_; }
  // Whether every byte outside [get(), get() + bytes) is still `fill`.
  bool margins_are(unsigned char fill) const {
    for (const unsigned char* p = storage_.data(); p != storage_.data() + storage_.size(); ++p)
      if ((p < at_ || p >= at_ + bytes_) && *p != fill) return false;
    return true;
  }

 private:
  std::vector<unsigned char> storage_;
  unsigned char* at_ = nullptr;
  std::size_t bytes_;
};

}  // namespace

TEST_CASE("shm allreduce: each rank's input and output anywhere in a page", "[runtime][shm]") {
  check_all(run_ranks([](ShmComm& shm, int r) -> std::string {
    // float32 at multiples of 4 bytes, uint8 at any byte: the ranks' output offsets differ,
    // and the input sits elsewhere (or is the output).
    for (const std::size_t count : {std::size_t{4096}, std::size_t{300000}, std::size_t{1000003}})
      for (const bool in_place : {false, true}) {
        const std::string what =
            "count " + std::to_string(count) + (in_place ? " in place" : " out of place") + ": ";
        const std::size_t out_at = 4 * static_cast<std::size_t>(301 * r + 3) % 4096;
        Placed out(count * 4, out_at, 0xEE);
        Placed in(count * 4, (out_at + 24) % 4096, 0xEE);
        auto* dst = reinterpret_cast<float*>(out.get());
        auto* src = in_place ? dst : reinterpret_cast<float*>(in.get());
        const auto values = input_of(r, count);
        std::memcpy(src, values.data(), count * 4);
        shm.allreduce(src, dst, count, DataType::kFloat32, ReduceOp::kSum);
        if (auto e = check_sum(std::vector<float>(dst, dst + count)); !e.empty()) return what + e;
        if (!out.margins_are(0xEE)) return what + "wrote outside the output";

        Placed bytes_out(count, static_cast<std::size_t>(1365 * r + 1) % 4096, 0xEE);
        Placed bytes_in(count, static_cast<std::size_t>(7 * r + 40) % 4096, 0xEE);
        unsigned char* bdst = bytes_out.get();
        unsigned char* bsrc = in_place ? bdst : bytes_in.get();
        for (std::size_t i = 0; i < count; ++i)
          bsrc[i] = static_cast<unsigned char>((i * 31 + static_cast<std::size_t>(r)) % 80);
        shm.allreduce(bsrc, bdst, count, DataType::kUInt8, ReduceOp::kSum);
        for (std::size_t i = 0; i < count; ++i) {
          unsigned want = 0;
          for (int l = 0; l < kRanks; ++l) want += (i * 31 + static_cast<std::size_t>(l)) % 80;
          if (bdst[i] != want) return what + "uint8 element " + std::to_string(i);
        }
        if (!bytes_out.margins_are(0xEE)) return what + "uint8 wrote outside the output";
      }
    return "";
  }));
}
