// The rank's side of the stack report (common/stack_file.h, docs/diagnosis.md#the-stack-report).
// When the rank's agent names a stack file and a signal in its environment, libhvdrun installs,
// as it loads, a handler for that signal and a thread. The handler does only what a signal
// handler may: it calls the handler installed before it, writes the native frames of the
// thread the signal reached (in a process without Python; the hvdrun Python package dumps the
// Python threads itself, faulthandler chained in front of this handler), and writes a byte to
// a pipe. The thread, woken by that byte, asks the engines what this rank waits in, under
// their own lock, and appends that and the end line to the file. Nothing of this is on a
// collective's path: the engines are asked only when a report is wanted.
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/fd.h"
#include "common/stack_file.h"
#include "runtime/api/api_state.h"

namespace hvdrun::api_detail {

namespace {

// Set once, before the handler is installed; read by the handler and the thread only.
struct Report {
  int file = -1;    // the stack file, O_APPEND
  int wake_w = -1;  // the handler's byte goes here
  int wake_r = -1;
  bool native = false;  // write native frames (no Python in this process)
  struct sigaction previous {};
};
Report g_report;

void put(const char* s) { (void)write_all(g_report.file, s, std::strlen(s)); }

void on_signal(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  const struct sigaction& prev = g_report.previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
  if (g_report.native) {
    // backtrace() was called once at install time, so it does not load libgcc here.
    void* frames[64];
    const int n = ::backtrace(frames, 64);
    put(stack_file::kNativeLine);
    put("\n");
    ::backtrace_symbols_fd(frames, n, g_report.file);
  }
  const char byte = 1;
  (void)write_all(g_report.wake_w, &byte, 1);
  errno = saved;
}

// "hvdrun-wait: ..." lines for every engine of the joined job, or the line that says none.
std::string waits_text() {
  using std::chrono::milliseconds;
  const std::string prefix = stack_file::kWaitPrefix;
  std::shared_ptr<Joined> j = joined_if_any();
  if (!j) return std::string(stack_file::kNoWait) + " (hvdrun is not initialised)\n";
  std::string text;
  if (std::string w = j->engine->wait_report(milliseconds(1000)); !w.empty())
    text += prefix + w + "\n";
  std::lock_guard lock(j->sets_mu);
  for (const auto& [id, set] : j->sets) {
    if (!set->engine) continue;
    if (std::string w = set->engine->wait_report(milliseconds(1000)); !w.empty())
      text += prefix + "process set " + std::to_string(id) + ": " + w + "\n";
  }
  return text.empty() ? std::string(stack_file::kNoWait) + "\n" : text;
}

void serve() {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, stack_file::signal_number());
  pthread_sigmask(SIG_BLOCK, &block, nullptr);  // the program's threads take the signal
  for (;;) {
    char bytes[64];
    const ssize_t n = ::read(g_report.wake_r, bytes, sizeof bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::string text;
    try {
      text = waits_text();
    } catch (const std::exception& e) {
      text = std::string(stack_file::kNoWait) + " (" + e.what() + ")\n";
    }
    text += std::string(stack_file::kEndLine) + "\n";
    (void)write_all(g_report.file, text.data(), text.size());
  }
}

// Installs the handler and starts the thread when the agent asked for it; false otherwise.
bool install() {
  const char* path = std::getenv(stack_file::kFileEnv);
  const char* sig_text = std::getenv(stack_file::kSignalEnv);
  if (path == nullptr || sig_text == nullptr) return false;
  char* end = nullptr;
  const long sig = std::strtol(sig_text, &end, 10);
  // Only the signal this build expects: another number is no request of an hvdrun agent.
  if (*end != '\0' || sig != stack_file::signal_number()) return false;
  g_report.file = ::open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  if (g_report.file < 0) return false;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return false;
  g_report.wake_r = pipe_fds[0];
  g_report.wake_w = pipe_fds[1];
  g_report.native = ::dlsym(RTLD_DEFAULT, "Py_IsInitialized") == nullptr;
  void* warm[1];
  (void)::backtrace(warm, 1);
  std::thread(serve).detach();  // for the life of the process
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  return ::sigaction(static_cast<int>(sig), &sa, &g_report.previous) == 0;
}

// As the library loads: before the Python package registers its dump (which then chains to
// this handler), and before a C or C++ program's main.
[[maybe_unused]] const bool g_installed = install();

}  // namespace

}  // namespace hvdrun::api_detail
