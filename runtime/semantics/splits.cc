// The collectives' splits (semantics.h): an alltoall's, checked at submission and
// exchanged before its rows, and a reduce-scatter's row split.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/timeline.h"
#include "runtime/semantics/semantics.h"

namespace hvdrun::semantics {

void check_splits(const Collective& c, int n) {
  // (A rank that receives nothing may pass no output; recv_count is checked everywhere.)
  if (c.count > 0 && c.send == nullptr) throw InvalidArgument("hvdrun::alltoall: null buffer");
  if (c.splits == nullptr) {
    if (c.count % static_cast<std::size_t>(n) != 0)
      throw InvalidArgument("hvdrun::alltoall: " + std::to_string(c.count) +
                            " elements cannot be split equally among " + std::to_string(n) +
                            " ranks; pass splits (elements for each rank)");
    return;
  }
  std::int64_t sum = 0;
  for (int r = 0; r < n; ++r) {
    if (c.splits[r] < 0)
      throw InvalidArgument("hvdrun::alltoall: splits[" + std::to_string(r) + "] is " +
                            std::to_string(c.splits[r]) + "; splits cannot be negative");
    sum += c.splits[r];
  }
  if (static_cast<std::size_t>(sum) != c.count)
    throw InvalidArgument("hvdrun::alltoall: the splits add up to " + std::to_string(sum) +
                          " elements but the tensor has " + std::to_string(c.count) +
                          "; give one entry per rank (" + std::to_string(n) +
                          ") adding up to the tensor's size");
}

std::vector<std::size_t> slices(const runtime::Request& r, int n) {
  const auto rows = static_cast<std::size_t>(r.shape[0]);
  const std::size_t row = rows == 0 ? 0 : r.count / rows;
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::size_t> out(N);
  for (std::size_t k = 0; k < N; ++k)
    out[k] = static_cast<std::size_t>(
                 slice_rows(static_cast<std::int64_t>(rows), n, static_cast<int>(k))) *
             row;
  return out;
}

void alltoall(const Group& g, const Collective& a) {
  const int n = g.size, me = g.rank;
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::int64_t> mine(N + 1), all(N * (N + 1));
  for (std::size_t j = 0; j < N; ++j)
    mine[j] = a.splits != nullptr ? a.splits[j] : static_cast<std::int64_t>(a.count / N);
  mine[N] = static_cast<std::int64_t>(a.recv_count);
  {
    const runtime::TimelineActivity splits("ALLTOALL_SPLITS");
    g.host().allgather(mine.data(), all.data(), mine.size() * sizeof(std::int64_t));
  }
  auto at = [&](std::size_t i, std::size_t j) { return all[i * (N + 1) + j]; };
  for (std::size_t j = 0; j < N; ++j) {
    std::int64_t in = 0;
    for (std::size_t i = 0; i < N; ++i) in += at(i, j);
    if (in > at(j, N))
      throw runtime::Refused("hvdrun::alltoall: rank " + std::to_string(j) + " is sent " +
                             std::to_string(in) + " elements but its output holds " +
                             std::to_string(at(j, N)) +
                             " (recv_count); size the output from the splits every rank sends it");
  }
  const std::size_t es = dtype_size(a.dtype);
  std::vector<std::size_t> out(N), in(N), matrix(N * N);
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = 0; j < N; ++j) matrix[i * N + j] = static_cast<std::size_t>(at(i, j)) * es;
  for (std::size_t k = 0; k < N; ++k) {
    out[k] = static_cast<std::size_t>(at(static_cast<std::size_t>(me), k));
    in[k] = static_cast<std::size_t>(at(k, static_cast<std::size_t>(me)));
    if (a.received_splits != nullptr) a.received_splits[k] = static_cast<std::int64_t>(in[k]);
  }
  if (a.device) {
    const runtime::TimelineActivity nccl("NCCL_ALLTOALL");
    g.nccl().alltoallv(a.send, out, a.recv, in, a.dtype, a.cuda_stream);
  } else {
    g.host().alltoallv(a.send, a.recv, matrix);
  }
}

}  // namespace hvdrun::semantics
