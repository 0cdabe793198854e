// The unique-id exchange of NCCL communicators (see nccl_bootstrap.h).
#include "runtime/nccl/nccl_bootstrap.h"

#include <algorithm>
#include <exception>
#include <optional>

#include "hvdrun/hvdrun.h"

namespace hvdrun::runtime {

namespace {

// What an id's creator publishes: "id:<id>", or "error:<why>" with `failure` set to why.
std::string id_value(const std::function<std::string()>& make_id, std::string& failure) {
  try {
    return "id:" + make_id();
  } catch (const std::exception& e) {
    failure = e.what();
    return "error:" + failure;
  }
}

// The id in a published value; `creator_failed` opens the error when its creator failed.
std::string id_from(const std::optional<std::string>& v, const std::string& key,
                    const std::string& creator_failed) {
  if (!v) throw Error("nccl: key '" + key + "' vanished from the rendezvous store");
  if (v->rfind("error:", 0) == 0) throw Error("nccl: " + creator_failed + ": " + v->substr(6));
  if (v->rfind("id:", 0) != 0) throw Error("nccl: malformed unique id under '" + key + "'");
  return v->substr(3);
}

}  // namespace

std::string exchange_unique_id(rendezvous::Store& store, const std::string& key, int rank,
                               const std::function<std::string()>& make_id,
                               std::chrono::milliseconds timeout) {
  if (rank == 0) {
    std::string failure;
    const std::string value = id_value(make_id, failure);
    store.set(key, value);
    if (!failure.empty())
      throw Error("nccl: rank 0 could not create the NCCL unique id: " + failure);
    return value.substr(3);
  }
  auto missing = store.wait_for({key}, timeout);
  if (!missing.empty())
    throw Error("nccl: rank " + std::to_string(rank) + " waited " +
                std::to_string(timeout.count() / 1000) +
                " s for rank 0 to publish the NCCL unique id under '" + key +
                "'; rank 0 did not (it may have crashed or be stuck)");
  return id_from(store.get(key), key, "rank 0 could not create the NCCL unique id");
}

int nccl_id_count(int size, int ranks_per_id) {
  const long long n = std::max(size, 1);
  const long long per = std::max(ranks_per_id, 1);
  return static_cast<int>((n + per - 1) / per);
}

int nccl_id_owner(int index, int size, int count) {
  return static_cast<int>(static_cast<long long>(index) * std::max(size, 1) / std::max(count, 1));
}

int nccl_id_index(int rank, int size, int count) {
  const long long n = std::max(size, 1);
  const long long c = std::max(count, 1);
  // The smallest index whose owner is at or after `rank`; it is this rank's when equal.
  const long long i = (static_cast<long long>(rank) * c + n - 1) / n;
  if (i >= c || nccl_id_owner(static_cast<int>(i), size, count) != rank) return -1;
  return static_cast<int>(i);
}

std::string nccl_id_key(const std::string& key, int index) {
  return index == 0 ? key : (rendezvous::Key(key) / index).str();
}

std::vector<std::string> exchange_unique_ids(rendezvous::Store& store, const std::string& key,
                                             int rank, int size, int count,
                                             const std::function<std::string()>& make_id,
                                             std::chrono::milliseconds timeout) {
  if (count <= 1) return {exchange_unique_id(store, key, rank, make_id, timeout)};
  std::string own_failure;
  if (const int mine = nccl_id_index(rank, size, count); mine >= 0)
    store.set(nccl_id_key(key, mine), id_value(make_id, own_failure));
  if (!own_failure.empty())
    throw Error("nccl: rank " + std::to_string(rank) +
                " could not create its NCCL unique id: " + own_failure);
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) keys.push_back(nccl_id_key(key, i));
  auto missing = store.wait_for(keys, timeout);
  if (!missing.empty())
    throw Error("nccl: rank " + std::to_string(rank) + " waited " +
                std::to_string(timeout.count() / 1000) + " s for the NCCL unique ids; " +
                rendezvous::key_list(missing) +
                " never appeared (their owners, ranks floor(i * size / ids), may have crashed "
                "or be stuck)");
  auto values = store.multi_get(keys);
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) {
    const auto at = static_cast<std::size_t>(i);
    ids.push_back(id_from(values[at], keys[at],
                          "rank " + std::to_string(nccl_id_owner(i, size, count)) +
                              " could not create NCCL unique id " + std::to_string(i)));
  }
  return ids;
}

}  // namespace hvdrun::runtime
