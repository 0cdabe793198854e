// Name lookups for exec: hosts. An exec: host is a name for the user's command (a container,
// a pod), often no DNS name at all, and a lookup of a name that does not exist can take a
// DNS round trip or a resolver timeout: 1,024 of them one after another took 90 s. So the
// launch looks names up only when an address is needed (not with --network-interface, not
// for an address written as such), all at once in a bounded pool while the commands start,
// and waits for none past a deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hvdrun::launcher {

/// The first IPv4 address `name` resolves to (getaddrinfo), or empty when it does not.
std::string resolve_ipv4(const std::string& name);

/// Looks up a set of host names in parallel, at most `parallel` at a time, on threads of its
/// own (getaddrinfo cannot be cancelled: a lookup still running when this object goes is
/// left to finish, and its answer dropped).
class HostLookups {
 public:
  /// Turns a name into an IPv4 address, or empty (a seam for tests).
  using Resolver = std::function<std::string(const std::string& name)>;

  /// Starts looking up `names` (duplicates once; IPv4 addresses are their own answer and
  /// reach no resolver); answers are awaited until `deadline` at the latest.
  HostLookups(const std::vector<std::string>& names, std::size_t parallel,
              std::chrono::steady_clock::time_point deadline, Resolver resolver = resolve_ipv4);
  ~HostLookups();
  HostLookups(const HostLookups&) = delete;
  HostLookups& operator=(const HostLookups&) = delete;

  /// The address of `name`, waiting for its lookup until the deadline; empty when it does
  /// not resolve, was not answered in time, or was not among the names.
  std::string address(const std::string& name);

  /// How many names went to the resolver (the rest were addresses already).
  std::size_t resolver_calls() const;

  /// The names whose lookup has not finished yet, in the order given.
  std::vector<std::string> unanswered() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace hvdrun::launcher
