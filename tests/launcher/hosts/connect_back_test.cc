// The Slurm agents' port on its own (launcher/hosts/connect_back.h): handshakes run side by side
// under the pre-authentication gate every port shares, so idle connections delay no agent,
// and connections that fail the handshake are counted, their warnings rate-limited.
#include "launcher/hosts/connect_back.h"

#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "rendezvous/server.h"
#include "tests/rendezvous/connections.h"
#include "tests/support/captured_log.h"

using hvdrun::UniqueFd;
using hvdrun::launcher::ConnectBackPort;
using hvdrun::launcher::ConnectedAgent;
using hvdrun::rendezvous::testing::raw_connect;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Serves `port` until `done` holds or `deadline`; returns the agents that authenticated.
template <typename Done>
std::vector<ConnectedAgent> serve_until(ConnectBackPort& port, Done done,
                                        Clock::time_point deadline) {
  std::vector<ConnectedAgent> agents;
  while (!done() && Clock::now() < deadline) {
    for (auto& a : port.serve(std::min(deadline, Clock::now() + 20ms)))
      agents.push_back(std::move(a));
  }
  return agents;
}

}  // namespace

TEST_CASE("connect-back port: 30 idle connections do not delay an agent's handshake",
          "[launcher][security]") {
  const std::string secret = hvdrun::rendezvous::generate_secret();
  ConnectBackPort port("127.0.0.1", secret);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(raw_connect(port.port()));
  const auto t0 = Clock::now();
  std::atomic<bool> connected{false};
  std::string agent_error;
  std::thread agent([&] {
    try {
      UniqueFd s = hvdrun::launcher::connect_to_launcher(
          "127.0.0.1:" + std::to_string(port.port()), secret, hvdrun::launcher::machine_identity());
      connected = static_cast<bool>(s);
    } catch (const std::exception& e) {
      agent_error = e.what();
    }
  });
  auto agents = serve_until(
      port, [&] { return connected.load(); }, t0 + 10s);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  agent.join();
  INFO("agent: " << agent_error);
  REQUIRE(agents.size() == 1);
  CHECK_FALSE(agents[0].node.empty());
  CHECK(ms < 1000ms);  // one round trip; the 30 before it wait on their own deadlines
  CHECK(port.gate().pending() >= 30);  // (another user's connections would add to them)
  // The idle ones are closed at the handshake deadline (5 s), the agent's link is not.
  serve_until(
      port, [&] { return port.gate().pending() == 0; }, Clock::now() + 10s);
  CHECK(port.gate().pending() == 0);
}

TEST_CASE("connect-back port: 10,000 connections without the secret write a few warning lines",
          "[launcher][security]") {
  hvdrun::testing::CapturedLog log;
  ConnectBackPort port("127.0.0.1", hvdrun::rendezvous::generate_secret());
  constexpr int kTries = 10000;
  std::atomic<int> finished{0};
  std::thread stranger([&] {
    // A well-formed hello with a wrong MAC, each on a connection of its own; the next one
    // starts once the port has closed this one.
    const std::string text = "node\n1.0\n127.0.0.1:" + std::to_string(port.port());
    std::string hello = {0, 0, 0, static_cast<char>(text.size())};
    hello += text + std::string(64, 'x');
    for (int i = 0; i < kTries; ++i) {
      UniqueFd s = raw_connect(port.port());
      char buf[64];
      std::size_t got = 0;
      while (got < 32) {
        const ssize_t n = ::recv(s.get(), buf, sizeof buf, 0);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      ::send(s.get(), hello.data(), hello.size(), MSG_NOSIGNAL);
      while (::recv(s.get(), buf, sizeof buf, 0) > 0) {
      }
      ++finished;
    }
  });
  const auto t0 = Clock::now();
  serve_until(
      port, [&] { return finished.load() == kTries; }, t0 + 120s);
  stranger.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  INFO(log.text());
  CHECK(port.gate().refused() == kTries);
  const int lines = log.lines_with("did not prove the step's secret");
  CHECK(lines >= 1);
  CHECK(lines <= 1 + static_cast<int>(seconds / 10) + 1);  // first, then one per 10 s
  CHECK(log.lines_with("Slurm agents' port") == lines);
  WARN(kTries << " refused in " << seconds << " s: " << lines << " warning line(s)");
}
