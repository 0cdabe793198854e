// Pieces of the SSH interface that do not depend on libssh2: verdict names, exit-status
// mapping, shell quoting and the blocking run_command() built on the non-blocking channel.
#include "ssh/session.h"

#include <poll.h>
#include <signal.h>
#include <string.h>

#include <algorithm>

#include "common/deadline.h"

namespace hvdrun::ssh {

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::ok:
      return "ok";
    case Verdict::dns:
      return "dns";
    case Verdict::refused:
      return "refused";
    case Verdict::timeout:
      return "timeout";
    case Verdict::not_ssh:
      return "not-ssh";
    case Verdict::host_key_unknown:
      return "host-key-unknown";
    case Verdict::host_key_changed:
      return "host-key-changed";
    case Verdict::auth:
      return "auth";
    case Verdict::hvdrun_missing:
      return "hvdrun-missing";
    case Verdict::unsupported:
      return "unsupported";
  }
  return "unknown";
}

ConnectError::ConnectError(Verdict verdict, std::string detail, std::string fix,
                           std::string address)
    : LaunchError(detail),
      verdict_(verdict),
      detail_(std::move(detail)),
      fix_(std::move(fix)),
      address_(std::move(address)) {}

int ExitStatus::shell_code() const {
  if (signal.empty()) return code;
  static constexpr struct {
    const char* name;
    int number;
  } kSignals[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},
                  {"ABRT", SIGABRT}, {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"SEGV", SIGSEGV},
                  {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"USR1", SIGUSR1},
                  {"USR2", SIGUSR2}, {"BUS", SIGBUS},   {"TRAP", SIGTRAP}, {"XCPU", SIGXCPU}};
  for (const auto& s : kSignals) {
    if (signal == s.name) return 128 + s.number;
  }
  return 128 + SIGKILL;  // an unnamed signal: report it as a kill rather than success
}

std::string shell_quote(std::string_view word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
        return isalnum(static_cast<unsigned char>(c)) || strchr("/._-+=:,@%", c) != nullptr;
      })) {
    return std::string(word);
  }
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

namespace {

// Waits until the session's socket is ready for what the library needs, or the deadline.
// Returns false when the deadline has passed.
bool wait_ready(Session& session, Deadline deadline) {
  if (Clock::now() >= deadline) return false;
  pollfd pfd{session.fd(), session.poll_events(), 0};
  int timeout =
      static_cast<int>(std::min<long long>(ms_left(deadline) + 1, session.fd() < 0 ? 10 : 1000));
  ::poll(&pfd, session.fd() < 0 ? 0 : 1, timeout);
  return true;
}

}  // namespace

CommandResult run_command(Session& session, const std::string& command, Deadline deadline,
                          std::string_view input, std::size_t max_output) {
  auto channel = session.exec(command, deadline);
  CommandResult result;
  std::size_t sent = 0;
  bool eof_sent = false;
  bool out_done = false;
  bool err_done = false;
  char buf[16384];
  for (;;) {
    bool progress = false;
    while (sent < input.size()) {
      auto n = channel->write(input.data() + sent, input.size() - sent);
      if (n == kWouldBlock) break;
      sent += static_cast<std::size_t>(n);
      progress = true;
    }
    if (sent == input.size() && !eof_sent && channel->send_eof()) {
      eof_sent = true;
      progress = true;
    }
    for (auto [stream, text, done] : {std::tuple{Stream::out, &result.out, &out_done},
                                      std::tuple{Stream::err, &result.err, &err_done}}) {
      while (!*done) {
        auto n = channel->read(stream, buf, sizeof buf);
        if (n == kWouldBlock) break;
        if (n == 0) {
          *done = true;
          break;
        }
        progress = true;
        auto keep =
            std::min(static_cast<std::size_t>(n), max_output - std::min(max_output, text->size()));
        text->append(buf, keep);
      }
    }
    if (out_done && err_done && channel->eof()) {
      if (auto status = channel->exit_status()) {
        result.status = *status;
        return result;
      }
    }
    if (progress) continue;
    if (!wait_ready(session, deadline)) {
      throw SessionError("ssh " + session.target().alias + ": `" + command +
                         "` did not finish within the deadline");
    }
  }
}

std::unique_ptr<Channel> run_until_marker(Session& session, const std::string& command,
                                          const std::string& marker, Deadline deadline,
                                          CommandResult& result, std::string& rest) {
  auto channel = session.exec(command, deadline);
  result = {};
  rest.clear();
  std::string out;
  char buf[16384];
  for (;;) {
    bool progress = false;
    for (;;) {
      auto n = channel->read(Stream::out, buf, sizeof buf);
      if (n == kWouldBlock) break;
      if (n == 0) {
        // The command ended before the marker: collect the rest like run_command().
        result.out = std::move(out);
        for (;;) {
          bool more = false;
          for (;;) {
            auto e = channel->read(Stream::err, buf, sizeof buf);
            if (e == kWouldBlock || e == 0) break;
            if (result.err.size() < (1u << 20)) result.err.append(buf, static_cast<std::size_t>(e));
            more = true;
          }
          if (channel->eof()) {
            if (auto status = channel->exit_status()) {
              result.status = *status;
              return nullptr;
            }
          }
          if (more) continue;
          if (!wait_ready(session, deadline)) {
            throw SessionError("ssh " + session.target().alias + ": `" + command +
                               "` did not finish within the deadline");
          }
        }
      }
      out.append(buf, static_cast<std::size_t>(n));
      progress = true;
      // The marker is a whole line: at the start or after a newline, followed by one.
      for (std::size_t at = 0; (at = out.find(marker, at)) != std::string::npos; ++at) {
        std::size_t end = at + marker.size();
        if ((at == 0 || out[at - 1] == '\n') && end < out.size() && out[end] == '\n') {
          rest = out.substr(end + 1);
          result.out = out.substr(0, at);
          return channel;
        }
      }
      if (out.size() > (1u << 20)) {
        throw SessionError("ssh " + session.target().alias + ": `" + command +
                           "` wrote over 1 MiB without '" + marker + "'");
      }
    }
    if (progress) continue;
    if (!wait_ready(session, deadline)) {
      throw SessionError("ssh " + session.target().alias + ": `" + command +
                         "` did not start within the deadline");
    }
  }
}

}  // namespace hvdrun::ssh
