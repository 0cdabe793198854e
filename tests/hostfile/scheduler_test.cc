// Table-driven tests of the scheduler host sources: Slurm's compressed host lists and task
// counts (including the examples of Slurm's own documentation, checked against
// `scontrol show hostnames` of Slurm 22.05), PBS node files, LSF's LSB_MCPU_HOSTS and SGE's
// PE_HOSTFILE, the detection order, and the exact message for each malformed value.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "hostfile/scheduler.h"

using hvdrun::UsageError;
using hvdrun::hostfile::HostSlots;
namespace hf = hvdrun::hostfile;

namespace {

using Hosts = std::vector<HostSlots>;
using Names = std::vector<std::string>;

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/hvdrun-sched-XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = tmpl;
    std::ofstream(path) << text;
  }
  ~TempFile() { ::unlink(path.c_str()); }
};

}  // namespace

TEST_CASE("Slurm host lists expand as scontrol show hostnames does") {
  const std::vector<std::pair<std::string, Names>> cases = {
      {"node1", {"node1"}},
      {"gpu-a[001-003,007],gpu-b5", {"gpu-a001", "gpu-a002", "gpu-a003", "gpu-a007", "gpu-b5"}},
      {"tux[0-2,12]", {"tux0", "tux1", "tux2", "tux12"}},
      {"n[9-11]", {"n9", "n10", "n11"}},
      {"n[08-10]", {"n08", "n09", "n10"}},
      {"n[01-3]", {"n01", "n02", "n03"}},
      {"n[1-03]", {"n1", "n2", "n3"}},
      {"n[5]", {"n5"}},
      {"n[1-2]-ib[3-4]", {"n1-ib3", "n1-ib4", "n2-ib3", "n2-ib4"}},
      {"n[1-2][3-4]", {"n13", "n14", "n23", "n24"}},
      {"rack[1-2]-n[1,3]", {"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"}},
      {"a[1-3] b", {"a1", "a2", "a3", "b"}},
      {"a,,b", {"a", "b"}},
      {"[1-2]", {"1", "2"}},
      {"node[1-2],login.example.org", {"node1", "node2", "login.example.org"}},
      {"n[0998-1001]", {"n0998", "n0999", "n1000", "n1001"}},
  };
  for (const auto& [text, want] : cases) {
    INFO(text);
    CHECK(hf::expand_slurm_hostlist(text) == want);
  }
}

TEST_CASE("malformed Slurm host lists name the variable and the offending part") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"n[1-2",
       "SLURM_JOB_NODELIST: unclosed '[' in 'n[1-2'; expected a Slurm host list such "
       "as node[01-04,07],gpu5"},
      {"n[3-1]",
       "SLURM_JOB_NODELIST: range '3-1' in 'n[3-1]' runs backwards; expected the low "
       "bound first, as in node[1-4]"},
      {"n[]",
       "SLURM_JOB_NODELIST: bad range '' in 'n[]'; expected N or N-M (at most 9 digits "
       "each), as in node[01-04,07]"},
      {"n[1-x]",
       "SLURM_JOB_NODELIST: bad range '1-x' in 'n[1-x]'; expected N or N-M (at most 9 "
       "digits each), as in node[01-04,07]"},
      {"n[1,,2]",
       "SLURM_JOB_NODELIST: bad range '' in 'n[1,,2]'; expected N or N-M (at most 9 "
       "digits each), as in node[01-04,07]"},
      {"n1]",
       "SLURM_JOB_NODELIST: unexpected ']' in 'n1]'; expected a Slurm host list such as "
       "node[01-04,07],gpu5"},
      {"n[[1]]",
       "SLURM_JOB_NODELIST: '[' inside brackets in 'n[[1]]'; expected a Slurm host "
       "list such as node[01-04,07],gpu5"},
      {"no$de",
       "SLURM_JOB_NODELIST: host name 'no$de' contains '$'; expected a Slurm host list "
       "such as node[01-04,07],gpu5"},
      {"",
       "SLURM_JOB_NODELIST: empty host list; expected a Slurm host list such as "
       "node[01-04,07],gpu5"},
      {" , ",
       "SLURM_JOB_NODELIST: empty host list; expected a Slurm host list such as "
       "node[01-04,07],gpu5"},
      {"-n1",
       "SLURM_JOB_NODELIST: host name '-n1' starts with '-'; expected a Slurm host list "
       "such as node[01-04,07],gpu5"},
      {"n[0-999999999]",
       "SLURM_JOB_NODELIST: 'n[0-999999999]' names more than 1000000 hosts; "
       "expected a Slurm host list such as node[01-04,07],gpu5"},
      {"n[1-1000]x[1-1001]",
       "SLURM_JOB_NODELIST: 'n[1-1000]x[1-1001]' names more than 1000000 "
       "hosts; expected a Slurm host list such as node[01-04,07],gpu5"},
  };
  for (const auto& c : cases) {
    INFO(c.first);
    CHECK(error_of([&] { hf::expand_slurm_hostlist(c.first); }) == c.second);
  }
}

TEST_CASE("SLURM_TASKS_PER_NODE expands its repeat counts") {
  const std::vector<std::pair<std::string, std::vector<int>>> cases = {
      {"4(x2),2,1(x2)", {4, 4, 2, 1, 1}},
      {"2(x3)", {2, 2, 2}},
      {"1", {1}},
      {"8,4", {8, 4}},
  };
  for (const auto& [text, want] : cases) {
    INFO(text);
    CHECK(hf::expand_slurm_tasks_per_node(text) == want);
  }
  const std::vector<std::pair<std::string, std::string>> errors = {
      {"4(x2",
       "SLURM_TASKS_PER_NODE: bad repeat '(x2'; expected counts such as 4(x2),2,1 (N or "
       "N(xREPEAT), comma-separated)"},
      {"4(2)",
       "SLURM_TASKS_PER_NODE: bad repeat '(2)'; expected counts such as 4(x2),2,1 (N or "
       "N(xREPEAT), comma-separated)"},
      {"4(x0)",
       "SLURM_TASKS_PER_NODE: bad repeat '(x0)'; expected counts such as 4(x2),2,1 (N or "
       "N(xREPEAT), comma-separated)"},
      {"two",
       "SLURM_TASKS_PER_NODE: bad task count 'two'; expected counts such as 4(x2),2,1 (N "
       "or N(xREPEAT), comma-separated)"},
      {"2,,1",
       "SLURM_TASKS_PER_NODE: bad task count ''; expected counts such as 4(x2),2,1 (N or "
       "N(xREPEAT), comma-separated)"},
      {"1(x99999999)",
       "SLURM_TASKS_PER_NODE: names more than 1000000 nodes; expected counts "
       "such as 4(x2),2,1 (N or N(xREPEAT), comma-separated)"},
  };
  for (const auto& e : errors) {
    INFO(e.first);
    CHECK(error_of([&] { hf::expand_slurm_tasks_per_node(e.first); }) == e.second);
  }
}

TEST_CASE("a Slurm allocation pairs nodes with their task counts") {
  CHECK(hf::parse_slurm_allocation("gpu-a[001-003,007],gpu-b5", "4(x2),2,1(x2)") ==
        Hosts{{"gpu-a001", 4}, {"gpu-a002", 4}, {"gpu-a003", 2}, {"gpu-a007", 1}, {"gpu-b5", 1}});
  CHECK(hf::parse_slurm_allocation("node[1-3]", "2(x3)") ==
        Hosts{{"node1", 2}, {"node2", 2}, {"node3", 2}});
  CHECK(hf::parse_slurm_allocation("node[1-3]", "2,0,1") == Hosts{{"node1", 2}, {"node3", 1}});
  CHECK(error_of([] { hf::parse_slurm_allocation("node[1-3]", "2(x2)"); }) ==
        "SLURM_TASKS_PER_NODE: '2(x2)' gives counts for 2 nodes but SLURM_JOB_NODELIST "
        "'node[1-3]' names 3; run inside one allocation, or pass -H/--hostfile");
  CHECK(error_of([] { hf::parse_slurm_allocation("n[1-2],n1", "1(x3)"); }) ==
        "SLURM_JOB_NODELIST: node 'n1' is listed twice in 'n[1-2],n1'; expected each node once");
  CHECK(error_of([] { hf::parse_slurm_allocation("n1", "0"); }) ==
        "SLURM_TASKS_PER_NODE: '0' gives no node a task; expected at least one count above 0");
}

TEST_CASE("PBS node files count one line per slot") {
  CHECK(hf::parse_pbs_nodefile_text("n1\nn1\nn2\nn1\n\n n3 \r\n", "f") ==
        Hosts{{"n1", 3}, {"n2", 1}, {"n3", 1}});
  CHECK(error_of([] { hf::parse_pbs_nodefile_text("n1\nn2 4\n", "/var/pbs/aux/1"); }) ==
        "PBS_NODEFILE /var/pbs/aux/1:2: unexpected text after the host in 'n2 4'; expected one "
        "host name per line, one line per slot");
  CHECK(error_of([] { hf::parse_pbs_nodefile_text("n;1\n", "f"); }) ==
        "PBS_NODEFILE f:1: host name 'n;1' contains ';'; expected one host name per line, one "
        "line per slot");
  // A control byte is named as such, apart from the four characters of its escape.
  CHECK(error_of([] {
          hf::parse_pbs_nodefile_text(
              "n\x07"
              "1\n",
              "f");
        }) ==
        "PBS_NODEFILE f:1: host name 'n\\x071' contains '\\x07'; expected one host name per "
        "line, one line per slot");
  CHECK(error_of([] { hf::parse_pbs_nodefile_text("n\\x07\n", "f"); }) ==
        "PBS_NODEFILE f:1: host name 'n\\\\x07' contains '\\\\'; expected one host name per "
        "line, one line per slot");
  CHECK(error_of([] { hf::parse_pbs_nodefile_text("-n1\n", "f"); }) ==
        "PBS_NODEFILE f:1: host name '-n1' starts with '-'; expected one host name per line, one "
        "line per slot");
  CHECK(error_of([] { hf::parse_pbs_nodefile_text("\n\n", "f"); }) ==
        "PBS_NODEFILE f: no hosts; expected one host name per line, one line per slot");
}

TEST_CASE("LSF's LSB_MCPU_HOSTS pairs hosts and slots") {
  CHECK(hf::parse_lsf_mcpu_hosts("hostA 4 hostB 2") == Hosts{{"hostA", 4}, {"hostB", 2}});
  CHECK(hf::parse_lsf_mcpu_hosts(" hostA 4  hostB 2 hostA 1 ") ==
        Hosts{{"hostA", 5}, {"hostB", 2}});
  CHECK(error_of([] { hf::parse_lsf_mcpu_hosts("hostA 4 hostB"); }) ==
        "LSB_MCPU_HOSTS: host 'hostB' has no slot count; expected host and slot count pairs, as "
        "in 'hostA 4 hostB 2'");
  CHECK(error_of([] { hf::parse_lsf_mcpu_hosts("hostA four"); }) ==
        "LSB_MCPU_HOSTS: bad slot count 'four' for host 'hostA'; expected a whole number from 1 "
        "to 65536");
  CHECK(error_of([] { hf::parse_lsf_mcpu_hosts("hostA 0"); }) ==
        "LSB_MCPU_HOSTS: bad slot count '0' for host 'hostA'; expected a whole number from 1 to "
        "65536");
  CHECK(error_of([] { hf::parse_lsf_mcpu_hosts("  "); }) ==
        "LSB_MCPU_HOSTS: empty; expected host and slot count pairs, as in 'hostA 4 hostB 2'");
}

TEST_CASE("SGE's PE_HOSTFILE reads host and slots, summing a host's queues") {
  CHECK(hf::parse_sge_pe_hostfile_text("n1.cl 4 all.q@n1.cl UNDEFINED\nn2.cl 2 all.q@n2.cl 0,1\n"
                                       "n1.cl 2 gpu.q@n1.cl UNDEFINED\n",
                                       "pe") == Hosts{{"n1.cl", 6}, {"n2.cl", 2}});
  CHECK(error_of([] { hf::parse_sge_pe_hostfile_text("n1 4 q\nn2\n", "/tmp/pe"); }) ==
        "PE_HOSTFILE /tmp/pe:2: bad slot count '' for host 'n2'; expected a whole number from 1 "
        "to 65536, in 'host slots queue processors' per line");
  CHECK(error_of([] { hf::parse_sge_pe_hostfile_text("n1 4 q\nn1 65533 q\n", "pe"); }) ==
        "PE_HOSTFILE pe:2: host 'n1' has more than 65536 slots in all; expected at most that "
        "many per host");
}

TEST_CASE("the allocation is detected from the environment in a fixed order") {
  std::map<std::string, std::string> env;
  hf::GetEnv getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  CHECK_FALSE(hf::detect_allocation(getenv).has_value());

  TempFile pbs("p1\np1\np2\n");
  TempFile sge("s1 3 all.q@s1 UNDEFINED\n");
  env["PE_HOSTFILE"] = sge.path;
  CHECK(hf::detect_allocation(getenv)->scheduler == "sge");
  CHECK(hf::detect_allocation(getenv)->hosts == Hosts{{"s1", 3}});
  env["LSB_MCPU_HOSTS"] = "l1 2";
  CHECK(hf::detect_allocation(getenv)->scheduler == "lsf");
  env["PBS_NODEFILE"] = pbs.path;
  CHECK(hf::detect_allocation(getenv)->scheduler == "pbs");
  CHECK(hf::detect_allocation(getenv)->hosts == Hosts{{"p1", 2}, {"p2", 1}});
  env["SLURM_JOB_NODELIST"] = "node[1-2]";
  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  auto slurm = hf::detect_allocation(getenv);
  CHECK(slurm->scheduler == "slurm");
  CHECK(slurm->origin == "SLURM_JOB_NODELIST=node[1-2]");
  CHECK(slurm->hosts == Hosts{{"node1", 2}, {"node2", 2}});

  env.erase("SLURM_TASKS_PER_NODE");
  CHECK(error_of([&] { hf::detect_allocation(getenv); }) ==
        "SLURM_TASKS_PER_NODE is not set although SLURM_JOB_NODELIST is; run inside a Slurm "
        "allocation (salloc/sbatch), or pass -H/--hostfile");
  env.erase("SLURM_JOB_NODELIST");
  env["PBS_NODEFILE"] = "/nonexistent/nodefile";
  CHECK(error_of([&] { hf::detect_allocation(getenv); }) ==
        "PBS_NODEFILE=/nonexistent/nodefile: cannot open: No such file or directory; run inside "
        "the allocation, or pass -H/--hostfile");
}

TEST_CASE("PBS_NODEFILE and PE_HOSTFILE naming a FIFO, a device or a directory are refused") {
  char dir[] = "/tmp/hvdrun-sched-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string fifo = std::string(dir) + "/nodefile";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::map<std::string, std::string> env;
  hf::GetEnv getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  // No writer ever opens the FIFO: opening or reading it would wait for ever.
  for (const std::string var : {"PBS_NODEFILE", "PE_HOSTFILE"}) {
    env.clear();
    env[var] = fifo;
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(error_of([&] { hf::detect_allocation(getenv); }) ==
          var + "=" + fifo +
              ": a FIFO, not a regular file; run inside the allocation, or pass -H/--hostfile");
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
    env[var] = "/dev/zero";
    CHECK(error_of([&] { hf::detect_allocation(getenv); }) ==
          var +
              "=/dev/zero: a character device, not a regular file; run inside the allocation, "
              "or pass -H/--hostfile");
    env[var] = dir;
    CHECK(error_of([&] { hf::detect_allocation(getenv); }) ==
          var + "=" + dir +
              ": a directory, not a regular file; run inside the allocation, or pass "
              "-H/--hostfile");
  }
  ::unlink(fifo.c_str());
  ::rmdir(dir);
}
