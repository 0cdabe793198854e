// Test helper: runs a "job" without the launcher — an in-process rendezvous server and
// N rank processes with the HVDRUN_* environment — and collects exit codes and stderr.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/server.h"

namespace hvdrun::test {

/// Outcome of one rank process.
struct RankResult {
  int rank = -1;
  int exit_code = -1;  ///< exit status, 128+signal, or -1 if killed at the deadline
  std::string err;     ///< what it wrote to stderr (and stdout)
};

/// Outcome of a job.
struct JobResult {
  std::vector<RankResult> ranks;
  std::chrono::milliseconds elapsed{0};
  bool timed_out = false;
  /// Connections the rendezvous server accepted during the job.
  std::uint64_t connections = 0;
  /// True when every started rank exited 0.
  bool ok() const {
    for (const auto& r : ranks)
      if (r.exit_code != 0) return false;
    return !timed_out;
  }
  /// All stderr, prefixed by rank, for failure messages.
  std::string dump() const {
    std::string s;
    for (const auto& r : ranks)
      s += "[rank " + std::to_string(r.rank) + " exit " + std::to_string(r.exit_code) + "] " +
           r.err + "\n";
    return s;
  }
};

/// Job description.
struct JobSpec {
  int np = 1;
  std::vector<std::string> argv;           ///< program and arguments
  std::map<std::string, std::string> env;  ///< extra environment for every rank
  std::vector<int> skip;                   ///< ranks not started (to test missing ranks)
  std::vector<int> extra;                  ///< ranks started twice
  /// Ranks per simulated host, filled in order ("host0", "host1", ...; local, cross
  /// rank and size as the launcher sets them); empty: every rank on "localhost".
  std::vector<int> hosts;
  std::chrono::milliseconds deadline{60000};
};

inline JobResult run_job(const JobSpec& spec) {
  auto secret = rendezvous::generate_secret();
  rendezvous::Server server(secret, "127.0.0.1");
  server.start();
  char dir_template[] = "/tmp/hvdrun-job-XXXXXX";
  std::string dir = ::mkdtemp(dir_template);

  std::vector<int> ranks;
  for (int r = 0; r < spec.np; ++r)
    if (std::find(spec.skip.begin(), spec.skip.end(), r) == spec.skip.end()) ranks.push_back(r);
  for (int r : spec.extra) ranks.push_back(r);

  // Placement: host of each rank and its local rank, as hostfile/ fills hosts in order.
  std::vector<int> host_of(static_cast<std::size_t>(spec.np), 0);
  std::vector<int> local_of(static_cast<std::size_t>(spec.np), 0);
  std::vector<int> host_sizes = spec.hosts.empty() ? std::vector<int>{spec.np} : spec.hosts;
  for (int h = 0, r = 0; h < static_cast<int>(host_sizes.size()); ++h)
    for (int l = 0; l < host_sizes[static_cast<std::size_t>(h)] && r < spec.np; ++l, ++r) {
      host_of[static_cast<std::size_t>(r)] = h;
      local_of[static_cast<std::size_t>(r)] = l;
    }
  auto cross = [&](int l, int h) {  // (cross rank, cross size) of local rank l on host h
    int before = 0, all = 0;
    for (int k = 0; k < static_cast<int>(host_sizes.size()); ++k)
      if (host_sizes[static_cast<std::size_t>(k)] > l) {
        before += k < h ? 1 : 0;
        ++all;
      }
    return std::pair{before, all};
  };

  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<pid_t, RankResult>> procs;
  for (std::size_t idx = 0; idx < ranks.size(); ++idx) {
    int r = ranks[idx];
    const int h = host_of[static_cast<std::size_t>(r)];
    const int l = local_of[static_cast<std::size_t>(r)];
    auto [cross_rank, cross_size] = cross(l, h);
    std::map<std::string, std::string> env = {
        {"HVDRUN_RANK", std::to_string(r)},
        {"HVDRUN_SIZE", std::to_string(spec.np)},
        {"HVDRUN_LOCAL_RANK", std::to_string(l)},
        {"HVDRUN_LOCAL_SIZE", std::to_string(host_sizes[static_cast<std::size_t>(h)])},
        {"HVDRUN_CROSS_RANK", std::to_string(cross_rank)},
        {"HVDRUN_CROSS_SIZE", std::to_string(cross_size)},
        {"HVDRUN_HOSTNAME", spec.hosts.empty() ? "localhost" : "host" + std::to_string(h)},
        {"HVDRUN_RENDEZVOUS_ADDR", "127.0.0.1"},
        {"HVDRUN_RENDEZVOUS_PORT", std::to_string(server.port())},
        {"HVDRUN_SECRET", secret},
        {"HVDRUN_START_TIMEOUT", "20"},
    };
    for (const auto& [k, v] : spec.env) env[k] = v;
    std::vector<std::string> env_strings;
    env_strings.reserve(env.size());
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    for (char** e = environ; *e; ++e) {
      std::string s(*e);
      auto name = s.substr(0, s.find('='));
      if (!env.count(name)) env_strings.push_back(s);
    }
    std::string log = dir + "/" + std::to_string(idx) + ".log";
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> av, ev;
      for (const auto& a : spec.argv) av.push_back(const_cast<char*>(a.c_str()));
      av.push_back(nullptr);
      for (const auto& e : env_strings) ev.push_back(const_cast<char*>(e.c_str()));
      ev.push_back(nullptr);
      ::execve(av[0], av.data(), ev.data());
      ::_exit(127);
    }
    RankResult rr;
    rr.rank = r;
    rr.err = log;  // path for now
    procs.emplace_back(pid, rr);
  }

  JobResult result;
  auto deadline = t0 + spec.deadline;
  std::size_t left = procs.size();
  while (left > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (auto& [p, rr] : procs)
        if (p == pid) {
          rr.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          p = -1;
          --left;
        }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      result.timed_out = true;
      for (auto& [p, rr] : procs)
        if (p > 0) {
          ::kill(p, SIGKILL);
          ::waitpid(p, nullptr, 0);
          p = -1;
          --left;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  result.elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  for (auto& [p, rr] : procs) {
    std::ifstream f(rr.err);
    std::stringstream ss;
    ss << f.rdbuf();
    ::unlink(rr.err.c_str());
    rr.err = ss.str();
    result.ranks.push_back(rr);
  }
  ::rmdir(dir.c_str());
  result.connections = server.stats().accepted;
  server.stop();
  return result;
}

}  // namespace hvdrun::test
