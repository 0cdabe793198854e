// hvdrun under schedulers, end to end with the built binary: --dry-run (text and JSON) under
// fake Slurm, PBS, LSF and SGE environments, the host-source priority, --launcher auto, and
// malformed allocation variables (exit 2 naming the variable). Nothing here contacts a host:
// every host name is made up, so a dry run that tried would fail.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/processes.h"

using namespace hvdrun::testing;

namespace {

// A scratch directory with files written into it.
struct Scratch {
  TempDir dir{"sched"};
  std::string path = dir.path();
  std::string write(const std::string& name, const std::string& text, bool executable = false) {
    std::string file = path + "/" + name;
    std::ofstream(file) << text;
    if (executable) ::chmod(file.c_str(), 0755);
    return file;
  }
};

// PATH without srun (the fixture's srun lives in /usr/bin): an empty directory.
std::string path_without_srun(const Scratch& dir) { return "PATH=" + dir.path; }

struct Run {
  int code;
  std::string out, err;
};

Run dry_run(std::vector<std::string> args, std::vector<std::string> env) {
  args.insert(args.begin(), "--dry-run");
  Hvdrun h(std::move(args), std::move(env));
  int code = h.wait();
  return {code, h.out, h.err};
}

}  // namespace

TEST_CASE("dry run inside a Slurm allocation: 6 ranks, 2 per node, launched by srun") {
  Scratch bin;
  bin.write("srun", "#!/bin/sh\nexit 99\n", true);
  auto r = dry_run({"true"}, {"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[1-3]",
                              "SLURM_TASKS_PER_NODE=2(x3)", "PATH=" + bin.path});
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out ==
        "launcher: slurm; hosts from slurm (SLURM_JOB_NODELIST=node[1-3])\n"
        "0 node1 0\n1 node1 1\n2 node2 0\n3 node2 1\n4 node3 0\n5 node3 1\n");
}

TEST_CASE("dry run: Slurm's compressed ranges and task counts, -np below the slots") {
  Scratch empty;
  auto r = dry_run({"-np", "5", "true"},
                   {"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=gpu-a[001-002,007],gpu-b5",
                    "SLURM_TASKS_PER_NODE=2(x2),1(x2)", path_without_srun(empty)});
  REQUIRE(r.code == 0);
  CHECK(r.out ==
        "launcher: ssh; hosts from slurm (SLURM_JOB_NODELIST=gpu-a[001-002,007],gpu-b5)\n"
        "0 gpu-a001 0\n1 gpu-a001 1\n2 gpu-a002 0\n3 gpu-a002 1\n4 gpu-a007 0\n");
}

TEST_CASE("dry run under PBS, LSF and SGE") {
  Scratch d;
  const std::string nodefile = d.write("nodefile", "pa\npa\npb\npa\n");
  auto pbs = dry_run({"true"}, {"PBS_NODEFILE=" + nodefile, path_without_srun(d)});
  REQUIRE(pbs.code == 0);
  CHECK(pbs.out == "launcher: ssh; hosts from pbs (PBS_NODEFILE=" + nodefile +
                       ")\n0 pa 0\n1 pa 1\n2 pa 2\n3 pb 0\n");

  auto lsf = dry_run({"true"}, {"LSB_MCPU_HOSTS=la 1 lb 2", path_without_srun(d)});
  REQUIRE(lsf.code == 0);
  CHECK(lsf.out ==
        "launcher: ssh; hosts from lsf (LSB_MCPU_HOSTS=la 1 lb 2)\n0 la 0\n1 lb 0\n2 lb 1\n");

  const std::string pe = d.write("pe", "sa.cl 2 all.q@sa.cl UNDEFINED\nsb.cl 1 all.q@sb.cl 0\n");
  auto sge = dry_run({"true"}, {"PE_HOSTFILE=" + pe, path_without_srun(d)});
  REQUIRE(sge.code == 0);
  CHECK(sge.out == "launcher: ssh; hosts from sge (PE_HOSTFILE=" + pe +
                       ")\n0 sa.cl 0\n1 sa.cl 1\n2 sb.cl 0\n");
}

TEST_CASE("a host list wins over the allocation and the allocation wins over localhost") {
  Scratch d;
  auto r =
      dry_run({"-H", "localhost:1,hx:1", "true"}, {"LSB_MCPU_HOSTS=la 4", path_without_srun(d)});
  REQUIRE(r.code == 0);
  CHECK(r.out ==
        "launcher: ssh; hosts from -H/--hostfile; run here without SSH: localhost\n"
        "0 localhost 0\n1 hx 0\n");
  auto local = dry_run({"-np", "2", "true"}, {path_without_srun(d)});
  REQUIRE(local.code == 0);
  CHECK(local.out ==
        "launcher: ssh; hosts from localhost (no -H, --hostfile or allocation)\n0 localhost 0\n"
        "1 localhost 1\n");
}

TEST_CASE("dry run as JSON, with an exec: launcher") {
  Scratch d;
  auto r = dry_run({"--json", "--launcher", "exec:docker exec -i {host}", "-H", "c1:2,c2", "true"},
                   {path_without_srun(d)});
  REQUIRE(r.code == 0);
  CHECK(r.out ==
        "{\"launcher\": \"exec:docker exec -i {host}\", \"source\": \"-H/--hostfile\", "
        "\"hosts\": [{\"host\": \"c1\", \"slots\": 2, \"method\": \"exec\", \"gpus\": null}, "
        "{\"host\": \"c2\", \"slots\": 1, \"method\": \"exec\", \"gpus\": null}], \"ranks\": "
        "[{\"rank\": 0, \"host\": \"c1\", \"local_rank\": 0, \"gpus\": null}, {\"rank\": 1, "
        "\"host\": \"c1\", \"local_rank\": 1, \"gpus\": null}, {\"rank\": 2, \"host\": \"c2\", "
        "\"local_rank\": 0, \"gpus\": null}]}\n");
}

TEST_CASE("a malformed allocation variable is exit 2 naming it and the bad part") {
  Scratch d;
  struct Case {
    std::vector<std::string> env;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=node[1-3", "SLURM_TASKS_PER_NODE=1(x3)"},
       "SLURM_JOB_NODELIST: unclosed '[' in 'node[1-3'"},
      {{"SLURM_JOB_ID=1", "SLURM_JOB_NODELIST=node[1-3]", "SLURM_TASKS_PER_NODE=1(x3"},
       "SLURM_TASKS_PER_NODE: bad repeat '(x3'"},
      {{"LSB_MCPU_HOSTS=a 4 b"}, "LSB_MCPU_HOSTS: host 'b' has no slot count"},
      {{"PBS_NODEFILE=" + d.path + "/missing"}, "PBS_NODEFILE=" + d.path + "/missing: cannot open"},
      {{"PE_HOSTFILE=" + d.write("bad_pe", "s1 x q\n")}, "PE_HOSTFILE " + d.path + "/bad_pe:1: "},
      // A control byte is named as \x07, never as the backslash of its escape.
      {{"PBS_NODEFILE=" + d.write("bel",
                                  "n\x07"
                                  "1\n")},
       "PBS_NODEFILE " + d.path + "/bel:1: host name 'n\\x071' contains '\\x07'"},
  };
  for (const auto& c : cases) {
    auto env = c.env;
    env.push_back(path_without_srun(d));
    INFO(c.message);
    auto r = dry_run({"true"}, env);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("hvdrun: error: " + c.message, 0) == 0);
  }
}

// Issue #27, finding 9: a host source naming a FIFO made hvdrun wait for a writer for ever,
// --dry-run included. It is refused at once, by name, before anything starts.
TEST_CASE(
    "a FIFO, device or directory as PBS_NODEFILE, PE_HOSTFILE or --hostfile is exit 2 at once") {
  Scratch d;
  const std::string fifo = d.path + "/nodes";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    std::string message;
  };
  const std::string advice = "; run inside the allocation, or pass -H/--hostfile";
  const std::vector<Case> cases = {
      {{},
       {"PBS_NODEFILE=" + fifo},
       "PBS_NODEFILE=" + fifo + ": a FIFO, not a regular file" + advice},
      {{},
       {"PE_HOSTFILE=" + fifo},
       "PE_HOSTFILE=" + fifo + ": a FIFO, not a regular file" + advice},
      {{},
       {"PBS_NODEFILE=/dev/zero"},
       "PBS_NODEFILE=/dev/zero: a character device, not a regular file" + advice},
      {{},
       {"PBS_NODEFILE=" + d.path},
       "PBS_NODEFILE=" + d.path + ": a directory, not a regular file"},
      {{"--hostfile", fifo}, {}, "--hostfile '" + fifo + "': a FIFO, not a regular file"},
  };
  for (const auto& c : cases) {
    auto env = c.env;
    env.push_back(path_without_srun(d));
    auto args = c.args;
    args.insert(args.end(), {"-np", "1", "true"});
    INFO(c.message);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = dry_run(args, env);
    const double ms = ms_since(t0);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("hvdrun: error: " + c.message, 0) == 0);
    CHECK(ms < 1000.0 * kSlowdown);
  }
}

// ---- `srun hvdrun ...`: the environment srun gives each of its tasks.

TEST_CASE("started by srun once per task: exit 2 at once, and only task 0 says why") {
  const std::vector<std::string> step = {
      "SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[1-3]", "SLURM_TASKS_PER_NODE=2(x3)",
      "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=6",       "SLURM_NTASKS=6"};
  auto first = step;
  first.emplace_back("SLURM_PROCID=0");
  const auto t0 = std::chrono::steady_clock::now();
  Hvdrun h({"-np", "2", "true"}, first);
  CHECK(h.wait(std::chrono::seconds(10)) == 2);
  CHECK(ms_since(t0) < 1000 * kSlowdown);  // within a second; was 30 s waiting for agents
  CHECK(h.out.empty());
  CHECK(h.err ==
        "hvdrun: error: hvdrun was started by srun once per task (6 tasks in job step 0), and "
        "each copy would launch the whole job; run it once, in the batch script without srun "
        "(hvdrun starts its own step), or use --launcher ssh\nTry 'hvdrun --help'.\n");

  for (const char* procid : {"SLURM_PROCID=1", "SLURM_PROCID=5"}) {
    auto other = step;
    other.emplace_back(procid);
    Hvdrun quiet({"-np", "2", "true"}, other);
    CHECK(quiet.wait(std::chrono::seconds(10)) == 2);
    CHECK(quiet.out.empty());
    CHECK(quiet.err.empty());
  }

  // hvdrun check is the same mistake; a one-task step with -H is not one.
  Hvdrun check({"check"}, first);
  CHECK(check.wait() == 2);
  CHECK(count(check.err, "started by srun once per task") == 1);
  Hvdrun one({"--dry-run", "-H", "a:2", "true"},
             {"SLURM_JOB_ID=42", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=1", "SLURM_NTASKS=1",
              "SLURM_PROCID=0"});
  CHECK(one.wait() == 0);
  CHECK(one.out == "launcher: ssh; hosts from -H/--hostfile\n0 a 0\n1 a 1\n");
}

TEST_CASE("srun -n1 hvdrun without hosts: the step's variables are said to be the step's") {
  Scratch d;
  auto r = dry_run({"true"},
                   {"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[1-3]", "SLURM_TASKS_PER_NODE=1",
                    "SLURM_STEP_ID=0", "SLURM_NTASKS=1", "SLURM_PROCID=0", path_without_srun(d)});
  CHECK(r.code == 2);
  CHECK(r.err.find("gives counts for") == std::string::npos);
  CHECK_THAT(r.err, Catch::StartsWith("hvdrun: error: hvdrun runs inside srun's job step 0, so "
                                      "the Slurm variables describe that step "
                                      "(SLURM_TASKS_PER_NODE='1'), not the allocation of "
                                      "SLURM_JOB_NODELIST='node[1-3]'; run hvdrun in the batch "
                                      "script or the salloc shell itself"));
}

// ---- --launcher exec:COMMAND, with a stand-in for docker/kubectl exec: a script that takes
// the host name, notes it, and runs the rest of its arguments on "that host" (here).

namespace {

// The stand-in: `standin HOST CMD...` appends HOST to $dir/hosts and execs CMD.
std::string write_standin(Scratch& s) {
  return s.write("standin",
                 "#!/bin/sh\nhost=$1; shift\necho \"$host\" >> " + s.path + "/hosts\nexec \"$@\"\n",
                 true);
}

// -p 1: were any host logged in to over SSH, the preflight would fail (nothing listens on
// port 1), so a passing job proves that no SSH was used.
std::vector<std::string> exec_args(const std::string& standin, std::vector<std::string> rest) {
  std::vector<std::string> args = {"--launcher", "exec:" + standin + " {host}", "-p", "1",
                                   "-H",         "127.0.0.2:2,127.0.0.3:1"};
  args.insert(args.end(), rest.begin(), rest.end());
  return args;
}

}  // namespace

TEST_CASE("exec: runs each host's agent through the command, {host} replaced, no SSH") {
  Scratch s;
  const std::string standin = write_standin(s);
  Hvdrun h(exec_args(standin, {"sh", "-c", "echo $HVDRUN_RANK@$HVDRUN_HOSTNAME"}));
  REQUIRE(h.wait() == 0);
  auto out = lines(h.out);
  std::sort(out.begin(), out.end());
  CHECK(out == std::vector<std::string>{"[0]<stdout>:0@127.0.0.2", "[1]<stdout>:1@127.0.0.2",
                                        "[2]<stdout>:2@127.0.0.3"});
  auto hosts = lines(read_file(s.path + "/hosts"));
  std::sort(hosts.begin(), hosts.end());
  CHECK(hosts == std::vector<std::string>{"127.0.0.2", "127.0.0.3"});
}

TEST_CASE("exec: a failing rank's code comes back with its host named") {
  Scratch s;
  Hvdrun h(
      exec_args(write_standin(s), {"sh", "-c",
                                   "if [ $HVDRUN_RANK = 2 ]; then echo broken >&2; exit 7; fi; "
                                   "exec sleep 30"}));
  CHECK(h.wait(std::chrono::seconds(30)) == 7);
  CHECK(h.err.find("rank 2") != std::string::npos);
  CHECK(h.err.find("127.0.0.3") != std::string::npos);
  CHECK(h.err.find("broken") != std::string::npos);
}

TEST_CASE("exec: Ctrl-C ends the job with 130 and leaves nothing running") {
  Scratch s;
  const std::string marker = unique_marker();
  Hvdrun h(exec_args(write_standin(s),
                     {"sh", "-c", "echo $$ > " + s.path + "/pid.$HVDRUN_RANK; exec sleep 60"}),
           {marker});
  auto pids = read_pid_files(s.path, "pid.", 3, std::chrono::seconds(15));
  CHECK(processes_with(marker).size() >= 3);  // stand-ins (now agents) and ranks
  h.signal(SIGINT);
  CHECK(h.wait(std::chrono::seconds(20)) == 130);
  CHECK(wait_none_alive(pids, std::chrono::seconds(5)));
  CHECK(wait_none_with(marker, std::chrono::seconds(5)));
}

TEST_CASE("exec: the remote hvdrun's version is checked and a missing command is named") {
  Scratch s;
  const std::string standin = write_standin(s);
  const std::string old = s.write("old-hvdrun", "#!/bin/sh\necho 'hvdrun 0.0.1 (old)'\n", true);
  auto args = exec_args(standin, {"true"});
  args.insert(args.begin(), {"--remote-hvdrun", old});
  Hvdrun h(args);
  CHECK(h.wait() == 255);
  CHECK(h.err.find("found 'hvdrun 0.0.1 (old)' at " + old + ", expected 'hvdrun ") !=
        std::string::npos);
  CHECK(h.err.find("nothing was started") != std::string::npos);

  Hvdrun missing({"--launcher", "exec:/nonexistent/docker exec -i {host}", "-H", "c1", "true"});
  CHECK(missing.wait() == 255);
  CHECK(missing.err.find("host c1: cannot run '/nonexistent/docker' of --launcher "
                         "exec:/nonexistent/docker exec -i {host}: No such file or directory") !=
        std::string::npos);

  Hvdrun refused(
      {"--launcher", "exec:sh -c 'echo no such container {host} >&2; exit 1'", "-H", "c1", "true"});
  CHECK(refused.wait() == 255);
  CHECK(refused.err.find("no such container c1") != std::string::npos);
  CHECK(refused.err.find("the command exited with code 1 before") != std::string::npos);
}

// A stand-in that holds its login slot for 0.3 s: it notes its host in $dir/inflight, counts
// the hosts noted there at that moment into $dir/counts, then leaves and runs the agent. A
// host's slot stays taken until its agent answers, which is after it has left.
std::string write_counting_standin(Scratch& s) {
  ::mkdir((s.path + "/inflight").c_str(), 0755);
  return s.write("counting",
                 "#!/bin/sh\nhost=$1; shift\nd=" + s.path +
                     "\ntouch $d/inflight/$host\nls $d/inflight | wc -l >> $d/counts\n"
                     "sleep 0.3\nrm $d/inflight/$host\nexec \"$@\"\n",
                 true);
}

std::string host_list(int n) {
  std::string list;
  for (int i = 1; i <= n; ++i) list += (i > 1 ? ",127.0.1." : "127.0.1.") + std::to_string(i);
  return list;
}

TEST_CASE("exec: HVDRUN_LAUNCH_CONCURRENCY bounds the logins in flight and every host starts") {
  Scratch s;
  const std::string standin = write_counting_standin(s);
  Hvdrun h({"--launcher", "exec:" + standin + " {host}", "-H", host_list(8), "sh", "-c", "echo up"},
           {"HVDRUN_LAUNCH_CONCURRENCY=3"});
  REQUIRE(h.wait(std::chrono::seconds(60)) == 0);
  CHECK(count(h.out, "<stdout>:up\n") == 8);
  const auto counts = lines(read_file(s.path + "/counts"));
  REQUIRE(counts.size() == 8);
  int most = 0;
  for (const auto& c : counts) most = std::max(most, std::stoi(c));
  CHECK(most <= 3);
  CHECK(most >= 2);  // the window does run logins side by side

  Hvdrun bad({"--launcher", "exec:" + standin + " {host}", "-H", "c1", "true"},
             {"HVDRUN_LAUNCH_CONCURRENCY=0"});
  CHECK(bad.wait() == 2);
  CHECK(bad.err.find("HVDRUN_LAUNCH_CONCURRENCY='0' is not a whole number from 1 to 65536") !=
        std::string::npos);
}

TEST_CASE("exec: after a host fails to start, no further host is started") {
  Scratch s;
  // Host 127.0.1.2 refuses; the others log in slowly enough that all of them would start
  // if a failure did not close the window.
  const std::string standin =
      s.write("refusing",
              "#!/bin/sh\nhost=$1; shift\necho $host >> " + s.path +
                  "/hosts\nif [ $host = 127.0.1.2 ]; then echo refused $host >&2; exit 3; fi\n"
                  "sleep 0.3\nexec \"$@\"\n",
              true);
  Hvdrun h({"--launcher", "exec:" + standin + " {host}", "-H", host_list(12), "true"},
           {"HVDRUN_LAUNCH_CONCURRENCY=2"});
  CHECK(h.wait(std::chrono::seconds(60)) == 255);
  CHECK(h.err.find("refused 127.0.1.2") != std::string::npos);
  CHECK(h.err.find("more hosts were not tried after the first failure") != std::string::npos);
  // Hosts 1 and 2 were in flight; at most host 3 took 2's slot before its failure was read.
  CHECK(lines(read_file(s.path + "/hosts")).size() <= 3);
}

TEST_CASE("exec: an open-file limit too low for the host count fails before anything starts") {
  Scratch s;
  const std::string standin = write_standin(s);
  std::string cmd = "ulimit -n 64 && exec " + hvdrun_binary() + " --launcher 'exec:" + standin +
                    " {host}' -H " + host_list(200) + " true";
  CapturedProcess h({"sh", "-c", cmd});
  CHECK(h.wait(std::chrono::seconds(30)) == 2);
  CHECK(h.err.find("200 hosts need about") != std::string::npos);
  CHECK(h.err.find("open-file limit") != std::string::npos);
  CHECK(read_file(s.path + "/hosts").empty());  // no host was started
}

// Issue #28: ssh joins its arguments with spaces and the remote shell splits them again, so
// the agent command must arrive quoted for that shell. The stand-in does what ssh does:
// skips its options, takes the host, and runs the rest, joined, through `sh -c`.
std::string write_ssh_like(Scratch& s, const std::string& name) {
  return s.write(name,
                 "#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in -F) shift 2;; -*) shift;; *) "
                 "break;; esac; done\nhost=$1; shift\necho \"$host\" >> " +
                     s.path + "/hosts\nexec sh -c \"$*\"\n",
                 true);
}

TEST_CASE("exec: through a command that re-splits its arguments (ssh, or {command})") {
  Scratch s;
  // A remote hvdrun whose path has a space and a quote: it must survive the extra shell.
  ::mkdir((s.path + "/it's here").c_str(), 0755);
  const std::string remote = s.path + "/it's here/hvdrun";
  REQUIRE(::symlink(hvdrun_binary().c_str(), remote.c_str()) == 0);
  const std::vector<std::string> job = {
      "-H", "127.0.0.2:2,127.0.0.3", "--remote-hvdrun", remote, "sh", "-c", "echo $HVDRUN_RANK"};
  SECTION("a command named ssh gets the agent command as one quoted line") {
    auto args = std::vector<std::string>{"--launcher",
                                         "exec:" + write_ssh_like(s, "ssh") + " -F cfg {host}"};
    args.insert(args.end(), job.begin(), job.end());
    Hvdrun h(args);
    REQUIRE(h.wait(std::chrono::seconds(60)) == 0);
    auto out = lines(h.out);
    std::sort(out.begin(), out.end());
    CHECK(out == std::vector<std::string>{"[0]<stdout>:0", "[1]<stdout>:1", "[2]<stdout>:2"});
  }
  SECTION("any command: {command} puts the quoted line where it goes") {
    auto args = std::vector<std::string>{
        "--launcher", "exec:" + write_ssh_like(s, "joiner") + " -F cfg {host} {command}"};
    args.insert(args.end(), job.begin(), job.end());
    Hvdrun h(args);
    REQUIRE(h.wait(std::chrono::seconds(60)) == 0);
    CHECK(count(h.out, "<stdout>:") == 3);
  }
  auto hosts = lines(read_file(s.path + "/hosts"));
  std::sort(hosts.begin(), hosts.end());
  CHECK(hosts == std::vector<std::string>{"127.0.0.2", "127.0.0.3"});
}

// Issue #28: through exec: (a container) a rank keeps the environment the command gave its
// agent (the container's PATH, LD_LIBRARY_PATH and variables), with the forwarded set
// (but the launcher's paths) and -x on top. The stand-in container empties the environment
// and sets its own; the rank program is found on the container's PATH only.
TEST_CASE(
    "exec: a container's own environment reaches its ranks, -x and the forwarded set on top") {
  Scratch s;
  ::mkdir((s.path + "/ctr").c_str(), 0755);
  ::mkdir((s.path + "/ctr/bin").c_str(), 0755);
  s.write("ctr/bin/rankenv",
          "#!/bin/sh\necho \"R=$HVDRUN_RANK H=$CTR_HOST PATH=$PATH LD=$LD_LIBRARY_PATH "
          "HOME=$HOME CTR=$CTR_VAR OVERRIDE=$OVERRIDE X=$XVAR OMP=$OMP_NUM_THREADS "
          "NCCL=$NCCL_DEBUG LANG=${LANG:-none}\"\n",
          true);
  const std::string ctr_path = s.path + "/ctr/bin:/usr/bin:/bin";
  const std::string container =
      s.write("container",
              "#!/bin/sh\nhost=$1; shift\nexec env -i PATH=" + ctr_path +
                  " LD_LIBRARY_PATH=/ctr/lib HOME=/ctr/home CTR_HOST=\"$host\" CTR_VAR=inside "
                  "OVERRIDE=container OMP_NUM_THREADS=3 \"$@\"\n",
              true);
  Hvdrun h({"--launcher", "exec:" + container + " {host}", "-p", "1", "-H",
            "127.0.0.2:2,127.0.0.3:1", "-x", "OVERRIDE=given", "-x", "XVAR=x", "rankenv"},
           {"LD_LIBRARY_PATH=/launcher/lib", "NCCL_DEBUG=INFO", "LANG=C.UTF-8"});
  INFO("stderr: " << h.err);
  REQUIRE(h.wait(std::chrono::seconds(60)) == 0);
  auto out = lines(h.out);
  std::sort(out.begin(), out.end());
  const std::string rest = " PATH=" + ctr_path +
                           " LD=/ctr/lib HOME=/ctr/home CTR=inside OVERRIDE=given X=x OMP=3 "
                           "NCCL=INFO LANG=none";
  CHECK(out == std::vector<std::string>{"[0]<stdout>:R=0 H=127.0.0.2" + rest,
                                        "[1]<stdout>:R=1 H=127.0.0.2" + rest,
                                        "[2]<stdout>:R=2 H=127.0.0.3" + rest});
}

// Issue #28: exec: host names are the command's (containers), often no DNS names; looked up
// one after another, 1,024 of them took 90 s. Names that do not resolve start together, and
// with --network-interface none is looked up at all.
TEST_CASE("exec: 64 hosts whose names do not resolve start fast, looked up only when needed") {
  Scratch s;
  const std::string standin = write_standin(s);
  std::string names;
  for (int i = 1; i <= 64; ++i) names += (i > 1 ? ",sim" : "sim") + std::to_string(i) + ".invalid";
  for (bool interface : {true, false}) {
    INFO("--network-interface lo: " << interface);
    std::vector<std::string> args = {
        "--log-level", "debug", "--launcher", "exec:" + standin + " {host}", "-H", names};
    if (interface) args.insert(args.end(), {"--network-interface", "lo"});
    args.insert(args.end(), {"sh", "-c", "echo up"});
    const auto t0 = std::chrono::steady_clock::now();
    Hvdrun h(args);
    REQUIRE(h.wait(std::chrono::seconds(90)) == 0);
    CHECK(ms_since(t0) < 60000);  // generous for a loaded machine; was minutes for 1,024
    CHECK(count(h.out, "<stdout>:up\n") == 64);
    if (interface) {
      CHECK(count(h.err, "exec: hosts: no name lookups (--network-interface lo") == 1);
      CHECK(count(h.err, "looking up") == 0);
    } else {
      CHECK(count(h.err, "exec: hosts: looking up 64 names, 32 at a time") == 1);
      // A resolver that drops bursts (this machine's) leaves some unanswered: said once.
      CHECK(count(h.err, "exec: hosts: the resolver did not answer") <= 1);
    }
  }
}

TEST_CASE(
    "elastic mode inside an allocation without named hosts is refused before anything "
    "starts") {
  Hvdrun h({"--max-restarts", "1", "-np", "2", "true"},
           {"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[1-3]", "SLURM_TASKS_PER_NODE=2(x3)"});
  CHECK(h.wait() == 2);
  CHECK(h.out.empty());
  CHECK_THAT(h.err, Catch::Contains("elastic mode inside a slurm allocation "
                                    "(SLURM_JOB_NODELIST=node[1-3]) needs its hosts named: give "
                                    "-H/--hostfile, or --host-discovery-script PATH") &&
                        Catch::Contains("Try 'hvdrun --help'"));
}
