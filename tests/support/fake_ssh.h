// A scripted stand-in for the SSH layer: a Connector whose hosts fail with a chosen
// verdict or log in to a FakeSession whose commands answer from a table. For unit tests
// of the preflight and of anything that drives ssh::Session without a network.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ssh/session.h"

namespace hvdrun::testing {

/// How one fake host behaves.
struct FakeHost {
  /// When set, connect() throws this verdict with `detail` and `fix`.
  std::optional<ssh::Verdict> fail;
  /// Detail of the failure.
  std::string detail;
  /// Fix of the failure.
  std::string fix;
  /// Time connect() takes (bounded by the deadline; past it, the verdict is timeout).
  std::chrono::milliseconds delay{0};
  /// Answers to exec(command): unknown commands exit 127 with "command not found".
  std::function<ssh::CommandResult(const std::string& command)> run;
};

/// Connector over a table of FakeHosts keyed by alias. Thread-safe.
class FakeConnector : public ssh::Connector {
 public:
  /// Adds or replaces host `alias`.
  void add(const std::string& alias, FakeHost host);
  /// See ssh::Connector.
  std::unique_ptr<ssh::Session> connect(const ssh::Target& target, ssh::Deadline deadline) override;
  /// Targets connect() was called with, in call order.
  std::vector<ssh::Target> targets() const;
  /// Commands run through sessions of this connector ("alias: command").
  std::vector<std::string> commands() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, FakeHost> hosts_;
  std::vector<ssh::Target> targets_;
  std::shared_ptr<std::vector<std::string>> commands_ =
      std::make_shared<std::vector<std::string>>();
};

/// A FakeHost whose `--version` command prints `version` (exit 0).
FakeHost fake_host_with_version(const std::string& version);

}  // namespace hvdrun::testing
