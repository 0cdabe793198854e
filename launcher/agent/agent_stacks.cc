// The agent's part of the stack report (docs/diagnosis.md#the-stack-report). On a
// stacks-request it empties the stack file of each running rank (common/stack_file.h) and
// sends the rank the stack signal, but only a rank that catches it (its /proc status says so;
// behind a wrapper, the wrapper's child that does):
// the default action of a real-time signal would end any other. It answers once every
// signalled rank's file ends with the end line, or when the request's wait is over, with what
// the files hold by then. A rank that catches no such signal (a program that loads neither
// libhvdrun nor the hvdrun Python package) is described from /proc: its state and the kernel
// function it sleeps in.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "common/stack_file.h"
#include "launcher/agent/agent_state.h"

namespace hvdrun::launcher::agent_detail {

namespace {

std::string read_text(const std::string& path, std::size_t max) {
  std::ifstream in(path, std::ios::binary);
  std::string s;
  s.resize(max);
  in.read(s.data(), static_cast<std::streamsize>(max));
  s.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return s;
}

// Whether process `pid` catches signal `sig` (SigCgt in /proc/PID/status, a hex mask).
bool catches(pid_t pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return ((mask >> (sig - 1)) & 1) != 0;
  }
  return false;
}

// The process of the rank's tree that answers: the rank itself, else the first descendant that
// catches the signal (behind a wrapper: `sh -c "python train.py; ..."`), breadth first, a few
// levels down; 0 when none does.
pid_t answering(pid_t pid, int sig) {
  std::vector<pid_t> level{pid};
  for (int depth = 0; depth < 4 && !level.empty(); ++depth) {
    std::vector<pid_t> next;
    for (pid_t p : level) {
      if (catches(p, sig)) return p;
      const std::string id = std::to_string(p);
      std::ifstream in("/proc/" + id + "/task/" + id + "/children");
      pid_t child = 0;
      while (in >> child) next.push_back(child);
    }
    level = std::move(next);
  }
  return 0;
}

// What /proc says of a rank that cannot answer itself.
std::string proc_text(pid_t pid, const std::string& why) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/";
  std::string comm = read_text(dir + "comm", 64);
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  const std::string stat = read_text(dir + "stat", 512);
  const auto paren = stat.rfind(')');
  const std::string state = paren != std::string::npos && paren + 2 < stat.size()
                                ? stat.substr(paren + 2, 1)
                                : std::string("?");
  const std::string wchan = read_text(dir + "wchan", 128);
  return "process '" + comm + "' (pid " + std::to_string(pid) + "), state " + state +
         (wchan.empty() || wchan == "0" ? std::string() : ", in the kernel's " + wchan) + "; " +
         why + "\n";
}

// A longer report keeps its start (the threads) and its end (the waits and the end line).
std::string clipped(std::string s) {
  if (s.size() <= proto::kMaxStackText) return s;
  const std::size_t half = proto::kMaxStackText / 2;
  return s.substr(0, half) + "\n[... " + std::to_string(s.size() - 2 * half) +
         " bytes left out ...]\n" + s.substr(s.size() - half);
}

bool whole(const std::string& text) {
  const std::string end = std::string(stack_file::kEndLine) + "\n";
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

void Agent::request_stacks(const proto::StacksRequest& req) {
  if (stacks_) check_stacks(Clock::now(), true);  // the earlier request answered as it stands
  StacksWait w;
  w.id = req.id;
  w.answer.id = req.id;
  w.until = Clock::now() + milliseconds(std::min<std::uint32_t>(req.wait_ms, 60000));
  const int sig = stack_file::signal_number();
  for (auto& [n, r] : ranks_) {
    if (r.reaped || r.pid <= 0) continue;
    const pid_t target = error_dir_ ? answering(r.pid, sig) : 0;
    if (target == 0) {
      w.answer.ranks.push_back(
          {n, proto::StackStatus::no_handler,
           proc_text(r.pid,
                     "it has no stack report (it loads neither libhvdrun nor the hvdrun "
                     "Python package)")});
      continue;
    }
    // Emptied first: what the file holds afterwards is this request's.
    if (::truncate(error_dir_->stack_path(n).c_str(), 0) != 0 || ::kill(target, sig) != 0) {
      w.answer.ranks.push_back(
          {n, proto::StackStatus::no_handler,
           proc_text(r.pid, std::string("cannot ask it: ") + std::strerror(errno))});
      continue;
    }
    w.waiting.push_back(n);
  }
  spdlog::debug("stacks request {}: asked {} rank(s)", req.id, w.waiting.size());
  stacks_ = std::move(w);
  check_stacks(Clock::now(), false);
}

// Sends the answer once every asked rank's report is whole, or with what there is once
// `finish` or the wait is over.
void Agent::check_stacks(Clock::time_point now, bool finish) {
  if (!stacks_) return;
  StacksWait& w = *stacks_;
  finish = finish || now >= w.until;
  std::erase_if(w.waiting, [&](int n) {
    std::string text = read_text(error_dir_->stack_path(n), 4 * proto::kMaxStackText);
    const bool done = whole(text);
    if (!done && !finish) return false;
    w.answer.ranks.push_back(
        {n, done ? proto::StackStatus::whole : proto::StackStatus::partial, clipped(text)});
    return true;
  });
  if (!w.waiting.empty()) return;
  std::sort(w.answer.ranks.begin(), w.answer.ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  send(w.answer);
  stacks_.reset();
}

}  // namespace hvdrun::launcher::agent_detail
