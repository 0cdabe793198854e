// SlurmCluster: slurm.conf, the daemons as children in the foreground (-D), readiness by
// sinfo under a deadline, teardown by pid. Every daemon carries a marker in its environment,
// which slurmstepd and the tasks inherit, so teardown finds whatever is left of a job too.
#include "tests/support/slurm_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "tests/support/processes.h"
#include "tests/support/sshd_cluster.h"

namespace hvdrun::testing {
namespace {

using Clock = std::chrono::steady_clock;

bool executable(const char* path) { return ::access(path, X_OK) == 0; }

// Starts `argv` with stdout and stderr appended to `log` and `env_extra` added.
pid_t start_daemon(const std::vector<std::string>& argv, const std::string& log,
                   const std::vector<std::string>& env_extra) {
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("slurm cluster: fork failed");
  if (pid == 0) {
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    ::setpgid(0, 0);
    for (const auto& e : env_extra) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

void ensure_munged() {
  std::string out;
  if (run_process({"pgrep", "-x", "munged"}, &out) == 0) return;
  ::mkdir("/run/munge", 0755);
  run_process({"chown", "munge:munge", "/run/munge"});
  // munged daemonizes; it is left running for the machine's other clusters.
  run_process({"runuser", "-u", "munge", "--", "/usr/sbin/munged"}, &out);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (run_process({"munge", "-n"}) != 0) {
    if (Clock::now() > deadline)
      throw std::runtime_error("slurm cluster: munged did not start: " + out);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// A port for a Slurm daemon: below the kernel's ephemeral range (32768 and up here), so
// that no outgoing connection of a test running beside this one can take it between the
// check and the daemon's bind; free on every address, since slurmd binds the wildcard.
int unused_daemon_port() {
  std::mt19937 pick(std::random_device{}());
  for (int tries = 0; tries < 200; ++tries) {
    const int port = std::uniform_int_distribution<int>(20000, 32000)(pick);
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    sin.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0) return port;
  }
  throw std::runtime_error("slurm cluster: no free port in 20000-32000");
}

void stop(pid_t pid) {
  ::kill(pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

bool SlurmCluster::available() {
  return executable("/usr/sbin/slurmctld") && executable("/usr/sbin/slurmd") &&
         executable("/usr/bin/srun") && executable("/usr/bin/salloc") &&
         executable("/usr/sbin/munged") && ::access("/etc/munge/munge.key", R_OK) == 0;
}

SlurmCluster::SlurmCluster(int nodes, int cpus_per_node) {
  if (!available()) {
    throw std::runtime_error(
        "slurm cluster: slurmctld, slurmd, slurm-client or munge is missing; run "
        "scripts/install-deps.sh");
  }
  char tmpl[] = "/tmp/hvdrun-slurm-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("slurm cluster: mkdtemp failed");
  dir_ = tmpl;
  ::mkdir((dir_ + "/state").c_str(), 0700);
  ::mkdir((dir_ + "/spool").c_str(), 0700);
  conf_ = dir_ + "/slurm.conf";
  marker_ = "HVDRUN_SLURM_FIXTURE=" + dir_;
  try {
    ensure_munged();
    write_config(nodes, cpus_per_node);
    const std::vector<std::string> env = {marker_, "SLURM_CONF=" + conf_};
    daemons_.push_back(start_daemon({"/usr/sbin/slurmctld", "-D", "-i", "-f", conf_},
                                    dir_ + "/slurmctld.out", env));
    // A slurmd that finds no controller registers again only when the controller pings
    // it (minutes): start the nodes once the controller answers.
    wait_controller();
    nodes_ = nodes;
    for (int k = 1; k <= nodes; ++k) {
      const std::string node = "node" + std::to_string(k);
      ::mkdir((dir_ + "/spool/" + node).c_str(), 0700);
      daemons_.push_back(start_daemon({"/usr/sbin/slurmd", "-D", "-N", node, "-f", conf_},
                                      dir_ + "/slurmd-" + node + ".out", env));
    }
    wait_idle(nodes);
  } catch (...) {
    teardown();
    throw;
  }
}

SlurmCluster::~SlurmCluster() { teardown(); }

void SlurmCluster::teardown() {
  // Jobs first (slurmstepd and tasks), then the daemons, then anything that escaped.
  for (pid_t p : processes_with(marker_)) {
    bool daemon = false;
    for (pid_t d : daemons_) daemon = daemon || d == p;
    if (!daemon) ::kill(p, SIGKILL);
  }
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) stop(*it);
  daemons_.clear();
  for (pid_t p : processes_with(marker_)) ::kill(p, SIGKILL);
  if (!dir_.empty()) {
    run_process({"rm", "-rf", dir_});
    dir_.clear();
  }
}

void SlurmCluster::write_config(int nodes, int cpus_per_node) {
  std::ofstream c(conf_);
  c << "ClusterName=hvdtest\n"
    << "SlurmctldHost=localhost(127.0.0.1)\n"
    << "SlurmctldPort=" << unused_daemon_port() << "\n"
    << "AuthType=auth/munge\nCredType=cred/munge\n"
    << "SlurmUser=root\nSlurmdUser=root\n"
    << "StateSaveLocation=" << dir_ << "/state\n"
    << "SlurmdSpoolDir=" << dir_ << "/spool/%n\n"
    << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\n"
    << "SlurmdPidFile=" << dir_ << "/slurmd-%n.pid\n"
    << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\n"
    << "SlurmdLogFile=" << dir_ << "/slurmd-%n.log\n"
    << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
    << "SlurmdParameters=config_overrides\n"
    << "SchedulerType=sched/builtin\n"
    << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
    << "ReturnToService=2\nMpiDefault=none\n"
    << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
    // Steps of ended jobs go at once, so squeue shows what is really left.
    << "MinJobAge=2\nKillWait=2\n";
  for (int k = 1; k <= nodes; ++k) {
    c << "NodeName=node" << k << " NodeAddr=127.0.0." << k + 1 << " Port=" << unused_daemon_port()
      << " CPUs=" << cpus_per_node << "\n";
  }
  c << "PartitionName=debug Nodes=node[1-" << nodes << "] Default=YES MaxTime=INFINITE State=UP\n";
  if (!c) throw std::runtime_error("slurm cluster: cannot write " + conf_);
}

void SlurmCluster::wait_controller() {
  const auto deadline = Clock::now() + std::chrono::seconds(30 * kSlowdown);
  while (run_process(client({"scontrol", "ping"})) != 0) {
    if (Clock::now() > deadline)
      throw std::runtime_error("slurm cluster: slurmctld not answering within 30 s\n" + logs());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void SlurmCluster::wait_idle(int nodes) {
  const auto deadline = Clock::now() + std::chrono::seconds(30 * kSlowdown);
  for (;;) {
    std::string out;
    run_process(client({"sinfo", "-h", "-N", "-o", "%t"}), &out);
    if (count(out, "idle") == nodes) return;
    if (Clock::now() > deadline) {
      throw std::runtime_error("slurm cluster: nodes not idle within 30 s (sinfo: " + out + ")\n" +
                               logs());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string SlurmCluster::logs() const {
  std::string out;
  std::vector<std::string> files = {"/slurmctld.out", "/slurmctld.log"};
  for (int k = 1; k <= nodes_; ++k) {
    files.push_back("/slurmd-node" + std::to_string(k) + ".out");
    files.push_back("/slurmd-node" + std::to_string(k) + ".log");
  }
  for (const auto& f : files) out += "--- " + f + "\n" + read_file(dir_ + f);
  return out;
}

std::vector<std::string> SlurmCluster::env() const { return {"SLURM_CONF=" + conf_}; }

std::vector<std::string> SlurmCluster::client(std::vector<std::string> args) const {
  args.insert(args.begin(), {"env", "SLURM_CONF=" + conf_});
  return args;
}

std::string SlurmCluster::steps() const {
  std::string out;
  run_process(client({"squeue", "-h", "-s"}), &out);
  return out;
}

std::vector<pid_t> SlurmCluster::job_processes() const {
  std::vector<pid_t> out;
  for (pid_t p : processes_with(marker_)) {
    bool daemon = false;
    for (pid_t d : daemons_) daemon = daemon || d == p;
    if (!daemon) out.push_back(p);
  }
  return out;
}

}  // namespace hvdrun::testing
