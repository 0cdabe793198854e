// HostLookups: see host_lookup.h.
#include "launcher/plan/host_lookup.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace hvdrun::launcher {

std::string resolve_ipv4(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return {};
  char buf[INET_ADDRSTRLEN] = {};
  const auto* sin = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  ::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf);
  ::freeaddrinfo(res);
  return buf;
}

// Shared with the worker threads, which may outlive the HostLookups that started them.
struct HostLookups::State {
  std::mutex mutex;
  std::condition_variable answered;
  std::chrono::steady_clock::time_point deadline;
  Resolver resolver;
  // Every name, with its answer once there is one.
  std::map<std::string, std::optional<std::string>> answers;
  // The names still to look up, and the next one a worker takes.
  std::vector<std::string> queue;
  std::size_t next = 0;
  std::size_t calls = 0;
  bool abandoned = false;

  void work() {
    std::unique_lock lock(mutex);
    while (!abandoned && next < queue.size()) {
      const std::string name = queue[next++];
      ++calls;
      lock.unlock();
      std::string address = resolver(name);
      lock.lock();
      answers[name] = std::move(address);
      answered.notify_all();
    }
  }
};

HostLookups::HostLookups(const std::vector<std::string>& names, std::size_t parallel,
                         std::chrono::steady_clock::time_point deadline, Resolver resolver)
    : state_(std::make_shared<State>()) {
  state_->deadline = deadline;
  state_->resolver = std::move(resolver);
  for (const auto& name : names) {
    if (state_->answers.count(name)) continue;
    in_addr v4{};
    if (::inet_pton(AF_INET, name.c_str(), &v4) == 1) {
      state_->answers[name] = name;
    } else {
      state_->answers[name] = std::nullopt;
      state_->queue.push_back(name);
    }
  }
  const std::size_t workers = std::min(std::max<std::size_t>(parallel, 1), state_->queue.size());
  for (std::size_t i = 0; i < workers; ++i) {
    std::thread([state = state_] { state->work(); }).detach();
  }
}

HostLookups::~HostLookups() {
  const std::lock_guard lock(state_->mutex);
  state_->abandoned = true;
}

std::string HostLookups::address(const std::string& name) {
  std::unique_lock lock(state_->mutex);
  auto it = state_->answers.find(name);
  if (it == state_->answers.end()) return {};
  state_->answered.wait_until(lock, state_->deadline, [&] { return it->second.has_value(); });
  return it->second.value_or(std::string());
}

std::size_t HostLookups::resolver_calls() const {
  const std::lock_guard lock(state_->mutex);
  return state_->calls;
}

}  // namespace hvdrun::launcher

namespace hvdrun::launcher {

std::vector<std::string> HostLookups::unanswered() const {
  const std::lock_guard lock(state_->mutex);
  std::vector<std::string> out;
  for (const auto& name : state_->queue) {
    if (!state_->answers.at(name).has_value()) out.push_back(name);
  }
  return out;
}

}  // namespace hvdrun::launcher
