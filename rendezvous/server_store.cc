// The rendezvous server's store: keys within a byte budget, waiters woken when a key they
// wait on appears, and the answer to each request.
#include "rendezvous/server_store.h"

#include <charconv>
#include <utility>

#include "rendezvous/server.h"

namespace hvdrun::rendezvous {

namespace {

std::size_t cost(const std::string& key, const std::string& value) {
  return key.size() + value.size() + kStoreEntryOverhead;
}

}  // namespace

std::optional<std::string> ServerStore::get(const std::string& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

// Wakes waiters only when the key is new (waiters register on absent keys).
void ServerStore::set(const std::string& key, std::string value) {
  if (put(key, std::move(value))) notify(key);
}

// Sets `key` without waking anyone; true when the key is new.
bool ServerStore::put(const std::string& key, std::string value) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    bytes_ = bytes_ - it->second.size() + value.size();
    it->second = std::move(value);
    return false;
  }
  bytes_ += cost(key, value);
  entries_.emplace(key, std::move(value));
  return true;
}

void ServerStore::erase(const std::string& key, std::int64_t& existed) {
  auto it = entries_.find(key);
  existed = it == entries_.end() ? 0 : 1;
  if (it == entries_.end()) return;
  bytes_ -= cost(it->first, it->second);
  entries_.erase(it);
}

// Bytes the store would hold after setting keys[i] = values[i] for all i.
std::size_t ServerStore::bytes_after(const std::vector<std::string>& keys,
                                     const std::vector<std::string>& values) const {
  std::size_t total = bytes_;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end()) {
      total += cost(keys[i], values[i]);
    } else {
      total = total - it->second.size() + values[i].size();
    }
  }
  return total;
}

// False (with `r` saying why) when the store would outgrow its budget.
bool ServerStore::within_budget(const std::vector<std::string>& keys,
                                const std::vector<std::string>& values, Response& r) const {
  const std::size_t after = bytes_after(keys, values);
  if (after <= max_bytes_) return true;
  r.status = Status::kBadRequest;
  r.message = "rendezvous store full: this write would make it " + std::to_string(after) +
              " bytes, over its budget of " + std::to_string(max_bytes_) +
              " bytes (keys + values + " + std::to_string(kStoreEntryOverhead) +
              " per key; docs/rendezvous-protocol.md)";
  return false;
}

void ServerStore::wait_for(const std::string& key, std::weak_ptr<KeyWaiter> waiter,
                           std::uint64_t wait_id) {
  waiters_[key].push_back({std::move(waiter), wait_id});
}

void ServerStore::notify(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto list = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : list)
    if (auto s = w.waiter.lock()) s->key_arrived(w.wait_id);
}

void ServerStore::add(Request& request, Response& r) {
  std::int64_t cur = 0;
  auto it = entries_.find(request.keys[0]);
  if (it != entries_.end()) {
    const auto& s = it->second;
    auto [p, e] = std::from_chars(s.data(), s.data() + s.size(), cur);
    if (e != std::errc() || p != s.data() + s.size()) {
      r.status = Status::kBadRequest;
      r.message = "add: value of '" + request.keys[0] + "' is not an integer";
      return;
    }
  }
  cur += request.delta;
  std::vector<std::string> value = {std::to_string(cur)};
  if (!within_budget(request.keys, value, r)) return;
  r.number = cur;
  set(request.keys[0], std::move(value[0]));
}

Response ServerStore::apply(Request& request) {
  Response r;
  switch (request.op) {
    case Op::kSet:
      if (!within_budget(request.keys, request.values, r)) break;
      set(request.keys[0], std::move(request.values[0]));
      break;
    case Op::kMultiSet: {
      if (!within_budget(request.keys, request.values, r)) break;
      std::vector<std::string> fresh;
      for (std::size_t i = 0; i < request.keys.size(); ++i) {
        if (put(request.keys[i], std::move(request.values[i]))) fresh.push_back(request.keys[i]);
      }
      for (const auto& k : fresh) notify(k);
      break;
    }
    case Op::kGet:
      if (auto value = get(request.keys[0])) {
        r.values.emplace_back(std::move(*value));
      } else {
        r.status = Status::kNotFound;
      }
      break;
    case Op::kMultiGet:
      for (const auto& k : request.keys) r.values.emplace_back(get(k));
      break;
    case Op::kAdd:
      add(request, r);
      break;
    case Op::kDelete:
      erase(request.keys[0], r.number);
      break;
    case Op::kPing:
    case Op::kWait:  // the connection's (the server answers it when the keys are there)
      break;
  }
  return r;
}

}  // namespace hvdrun::rendezvous
