// Horovod's rendezvous key-value semantics and request validation, free of any I/O so
// that the server and the fuzzer share exactly the same code.
#include "compat/horovod_http_handler.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <utility>

namespace hvdrun::compat {
namespace {

/// Scope that elastic Horovod ranks read their coordinates from.
constexpr std::string_view kRankAndSizeScope = "rank_and_size";

/// Scope and key names: what Horovod and Gloo produce (scope prefixes, host names as
/// written on the command line including IPv6 literals with a zone index such as
/// fe80::1%eth0, decimal ranks, process-set hashes). Horovod does not percent-encode and
/// nothing here decodes, so "%2e%2e" is a literal name, not "..". Anything else is
/// refused, and "." / ".." too; names never touch a file system anyway.
bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 255 || s == "." || s == "..") return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-' || c == '.' || c == ':' || c == '[' || c == ']' ||
                    c == '@' || c == '+' || c == '=' || c == ',' || c == '~' || c == '%';
    if (!ok) return false;
  }
  return true;
}

std::size_t key_cost(const std::string& key, const std::string& value) {
  return key.size() + value.size() + kHorovodEntryOverhead;
}

std::size_t scope_cost(const std::string& scope) { return scope.size() + kHorovodEntryOverhead; }

std::optional<int> parse_rank(std::string_view s) {
  int value = 0;
  const auto* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, value);
  if (ec != std::errc() || p != end || value < 0) return std::nullopt;
  return value;
}

}  // namespace

HttpMethod parse_http_method(std::string_view name) {
  if (name == "GET") return HttpMethod::get;
  if (name == "PUT") return HttpMethod::put;
  if (name == "DELETE") return HttpMethod::delete_;
  return HttpMethod::other;
}

HorovodStore::HorovodStore(const hostfile::Placement& placement, std::size_t max_bytes)
    : max_bytes_(max_bytes) {
  const int size = placement.size();
  sizes_["global"] = size;
  for (const auto& slot : placement.ranks) {
    const std::string& host = placement.hosts.at(static_cast<std::size_t>(slot.host_index)).name;
    sizes_["local_" + host] = slot.local_size;
    sizes_["cross_" + std::to_string(slot.local_rank)] = slot.cross_size;
    coordinates_[host + ":" + std::to_string(slot.local_rank)] =
        std::to_string(slot.rank) + "," + std::to_string(size) + "," +
        std::to_string(slot.local_rank) + "," + std::to_string(slot.local_size) + "," +
        std::to_string(slot.cross_rank) + "," + std::to_string(slot.cross_size);
  }
}

HttpAnswer HorovodStore::get(const std::string& scope, const std::string& key) const {
  if (scope == kRankAndSizeScope) {
    auto it = coordinates_.find(key);
    if (it == coordinates_.end()) return {http_status::not_found, {}};
    return {http_status::ok, it->second};
  }
  std::lock_guard lock(mu_);
  auto s = scopes_.find(scope);
  if (s == scopes_.end()) return {http_status::not_found, {}};
  auto v = s->second.values.find(key);
  if (v == s->second.values.end()) return {http_status::not_found, {}};
  return {http_status::ok, v->second};
}

HttpAnswer HorovodStore::put(const std::string& scope, const std::string& key, std::string value) {
  if (scope == kRankAndSizeScope) return {http_status::method_not_allowed, {}};
  std::lock_guard lock(mu_);
  auto& s = scopes_[scope];
  auto it = s.values.find(key);
  const std::size_t old = it == s.values.end() ? 0 : key_cost(key, it->second);
  // A scope's name costs while it holds a value.
  const std::size_t added = key_cost(key, value) + (s.values.empty() ? scope_cost(scope) : 0);
  if (bytes_ + reserved_ - old + added > max_bytes_) {
    if (s.values.empty() && s.finished.empty()) scopes_.erase(scope);
    return {http_status::insufficient_storage,
            "rendezvous store is full: its budget of " + std::to_string(max_bytes_) +
                " bytes (keys, values and bodies in flight) is used up\n"};
  }
  bytes_ = bytes_ - old + added;
  if (it == s.values.end()) {
    s.values.emplace(key, std::move(value));
  } else {
    it->second = std::move(value);
  }
  return {http_status::ok, {}};
}

HttpAnswer HorovodStore::finish(const std::string& scope, const std::string& key) {
  if (scope == kRankAndSizeScope) return {http_status::method_not_allowed, {}};
  std::lock_guard lock(mu_);
  auto sized = sizes_.find(scope);
  if (sized != sizes_.end()) {
    // A placement-defined scope: the key is the finishing rank within the scope.
    // Counting distinct ranks makes a retried DELETE harmless.
    auto rank = parse_rank(key);
    if (!rank || *rank >= sized->second) {
      return {http_status::bad_request, "DELETE /" + scope + "/<rank> needs a rank below " +
                                            std::to_string(sized->second) + "\n"};
    }
    auto& s = scopes_[scope];
    s.finished.insert(*rank);
    if (static_cast<int>(s.finished.size()) == sized->second) {
      for (const auto& [k, v] : s.values) bytes_ -= key_cost(k, v);
      if (!s.values.empty()) bytes_ -= scope_cost(scope);
      scopes_.erase(scope);
      ++cleared_;
    }
    return {http_status::ok, {}};
  }
  // An ad-hoc scope: drop the key, and the scope once empty.
  auto s = scopes_.find(scope);
  if (s != scopes_.end()) {
    auto v = s->second.values.find(key);
    if (v != s->second.values.end()) {
      bytes_ -= key_cost(v->first, v->second);
      s->second.values.erase(v);
      if (s->second.values.empty()) bytes_ -= scope_cost(scope);
    }
    if (s->second.values.empty()) scopes_.erase(s);
  }
  return {http_status::ok, {}};
}

bool HorovodStore::reserve(std::size_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes > max_bytes_ || bytes_ + reserved_ + bytes > max_bytes_) return false;
  reserved_ += bytes;
  return true;
}

void HorovodStore::release(std::size_t bytes) {
  std::lock_guard lock(mu_);
  reserved_ -= std::min(bytes, reserved_);
}

HorovodStoreStats HorovodStore::stats() const {
  std::lock_guard lock(mu_);
  return {scopes_.size(), bytes_, reserved_, cleared_};
}

bool HorovodStore::consistent() const {
  std::lock_guard lock(mu_);
  std::size_t sum = 0;
  for (const auto& [name, scope] : scopes_) {
    if (!scope.values.empty()) sum += scope_cost(name);
    for (const auto& [k, v] : scope.values) sum += key_cost(k, v);
  }
  return sum == bytes_ && bytes_ + reserved_ <= max_bytes_;
}

HttpAnswer handle_horovod_request(HorovodStore& store, HttpMethod method, std::string_view target,
                                  std::string body) {
  // Exactly "/<scope>/<key>", both non-empty and made of name characters.
  std::string scope;
  std::string key;
  bool ok = !target.empty() && target.front() == '/';
  if (ok) {
    target.remove_prefix(1);
    auto slash = target.find('/');
    ok = slash != std::string_view::npos;
    if (ok) {
      scope = std::string(target.substr(0, slash));
      key = std::string(target.substr(slash + 1));
      ok = valid_name(scope) && valid_name(key);
    }
  }
  if (!ok) {
    return {http_status::bad_request,
            "expected /<scope>/<key> with names of letters, digits and _-.:\n"};
  }
  switch (method) {
    case HttpMethod::get:
      return store.get(scope, key);
    case HttpMethod::put:
      return store.put(scope, key, std::move(body));
    case HttpMethod::delete_:
      return store.finish(scope, key);
    case HttpMethod::other:
      break;
  }
  return {http_status::method_not_allowed, "only GET, PUT and DELETE are served\n"};
}

}  // namespace hvdrun::compat
