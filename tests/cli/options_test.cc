// Table-driven tests of hvdrun's command line: where the command starts, every option's
// value and checks, subcommands, and the exact one-line message for each bad input.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "cli/options.h"
#include "common/error.h"
#include "tests/cli/parse_error.h"

using hvdrun::cli::Action;
using hvdrun::cli::Command;
using hvdrun::cli::parse_command_line;
using hvdrun::hostfile::HostSlots;
using hvdrun::testing::error_of;

namespace {

using Args = std::vector<std::string>;

Args split(const std::string& line) {
  Args out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

}  // namespace

TEST_CASE("the command starts at the first word that is not an option") {
  struct Case {
    std::string line;
    Args command;
  };
  const std::vector<Case> cases = {
      {"-np 2 python train.py --lr 1", {"python", "train.py", "--lr", "1"}},
      {"-np 2 -- python -u train.py", {"python", "-u", "train.py"}},
      {"-np 2 -- -weird", {"-weird"}},
      {"-np 2 -- --", {"--"}},
      {"run -np 2 check", {"check"}},
      {"-np 2 check", {"check"}},
      {"-np 2 agent -np 3", {"agent", "-np", "3"}},
      {"-np 1 python -- x", {"python", "--", "x"}},
      {"-H a:2 -x A=1 ./bin -H b", {"./bin", "-H", "b"}},
      {"--num-proc=2 env", {"env"}},
      {"-np=2 env", {"env"}},
      {"-np 1 -", {"-"}},
  };
  for (const auto& c : cases) {
    INFO("args: " << c.line);
    Command cmd = parse_command_line(split(c.line));
    CHECK(cmd.action == Action::run);
    CHECK(cmd.options.command == c.command);
  }
}

TEST_CASE("horovodrun's examples parse") {
  auto cmd = parse_command_line(split("-np 4 -H localhost:4 python train.py"));
  CHECK(cmd.options.np == 4);
  CHECK(cmd.options.hosts == std::vector<HostSlots>{{"localhost", 4}});

  cmd = parse_command_line(split("-np 8 -H server1:4,server2:4 python train.py"));
  CHECK(cmd.options.np == 8);
  CHECK(cmd.options.hosts == std::vector<HostSlots>{{"server1", 4}, {"server2", 4}});

  cmd = parse_command_line(
      split("-np 16 -H server1:4,server2:4,server3:4,server4:4 -p 12345 python train.py"));
  CHECK(cmd.options.ssh_port == 12345);
  CHECK(cmd.options.hosts.size() == 4);

  // A -H value with spaces after commas arrives as one argument from the shell.
  cmd = parse_command_line({"-H", "a:2, b:2", "python", "x.py"});
  CHECK(cmd.options.hosts == std::vector<HostSlots>{{"a", 2}, {"b", 2}});
  CHECK_FALSE(cmd.options.np.has_value());
}

TEST_CASE("every option reaches LaunchOptions") {
  auto cmd = parse_command_line({"-np",
                                 "3",
                                 "-H",
                                 "[::1]:2,node1",
                                 "-p",
                                 "2222",
                                 "-i",
                                 "/keys/id",
                                 "--ssh-config",
                                 "/etc/cfg",
                                 "--start-timeout",
                                 "45",
                                 "--network-interface",
                                 "eth0",
                                 "--output-filename",
                                 "/tmp/out dir",
                                 "-x",
                                 "A=1",
                                 "--env",
                                 "B",
                                 "-xC=x y=z",
                                 "--env=D=",
                                 "--verbose",
                                 "--log-level",
                                 "INFO",
                                 "--prefix-output-with-timestamp",
                                 "--ranks-filter",
                                 "5,0-2,1",
                                 "--remote-hvdrun",
                                 "/opt/hvdrun/bin/hvdrun",
                                 "prog",
                                 "arg"});
  const auto& o = cmd.options;
  CHECK(cmd.action == Action::run);
  CHECK(o.np == 3);
  CHECK(o.hosts == std::vector<HostSlots>{{"::1", 2}, {"node1", 1}});
  CHECK(o.ssh_port == 2222);
  CHECK(o.ssh_identity_file == "/keys/id");
  CHECK(o.ssh_config == "/etc/cfg");
  CHECK(o.start_timeout_s == 45);
  CHECK(o.network_interface == "eth0");
  CHECK(o.output_filename == "/tmp/out dir");
  CHECK(o.console_ranks == std::vector<int>{0, 1, 2, 5});
  CHECK(o.env == std::vector<std::string>{"A=1", "B", "C=x y=z", "D="});
  CHECK(o.verbose);
  CHECK(o.log_level == "info");
  CHECK(o.prefix_timestamp);
  CHECK(o.remote_hvdrun == "/opt/hvdrun/bin/hvdrun");
  CHECK_FALSE(o.json);
  CHECK(o.command == Args{"prog", "arg"});
}

TEST_CASE("defaults") {
  auto cmd = parse_command_line(split("-np 2 true"));
  const auto& o = cmd.options;
  CHECK(o.np == 2);
  CHECK(o.hosts.empty());
  CHECK_FALSE(o.ssh_port.has_value());
  CHECK(o.start_timeout_s == 30);
  CHECK(o.log_level == "warning");
  CHECK_FALSE(o.verbose);
  CHECK_FALSE(o.prefix_timestamp);
  CHECK(o.env.empty());
  CHECK(o.output_filename.empty());
  CHECK(o.remote_hvdrun.empty());
}

TEST_CASE("value forms: next word, =value, attached short") {
  for (const auto& line : {"-p 22 -np 1 x", "-p22 -np 1 x", "-p=22 -np 1 x",
                           "--ssh-port 22 -np 1 x", "--ssh-port=22 -np 1 x"}) {
    INFO("args: " << line);
    CHECK(parse_command_line(split(line)).options.ssh_port == 22);
  }
  // A value that looks like a negative number is still the option's value.
  CHECK(error_of(split("-np -1 x")) ==
        "bad value '-1' for -np; expected a whole number of processes from 1 to 1048576, as in "
        "-np 4");
}

TEST_CASE("subcommands, help, version and check-build") {
  auto cmd = parse_command_line(split("check -H a,b:2 --json -p 2200 --start-timeout 5"));
  CHECK(cmd.action == Action::check);
  CHECK(cmd.options.json);
  CHECK(cmd.options.hosts.size() == 2);
  CHECK(cmd.options.ssh_port == 2200);
  CHECK(cmd.options.start_timeout_s == 5);
  CHECK(cmd.options.command.empty());

  CHECK(parse_command_line(split("check")).action == Action::check);
  CHECK(parse_command_line(split("check -np 2 -H a:2 -i k --ssh-config c --verbose "
                                 "--log-level debug --remote-hvdrun /x"))
            .action == Action::check);

  cmd = parse_command_line(split("stacks"));
  CHECK(cmd.action == Action::stacks);
  CHECK(cmd.stacks_pid == 0);
  cmd = parse_command_line(split("stacks 4242"));
  CHECK(cmd.action == Action::stacks);
  CHECK(cmd.stacks_pid == 4242);
  CHECK_THROWS_WITH(parse_command_line(split("stacks -np")),
                    "'hvdrun stacks -np': expected the pid of a running hvdrun, as in hvdrun "
                    "stacks 4242");
  CHECK_THROWS_AS(parse_command_line(split("stacks 1 2")), hvdrun::UsageError);

  cmd = parse_command_line(split("agent"));
  CHECK(cmd.action == Action::agent);
  cmd = parse_command_line(split("agent --log-level trace"));
  CHECK(cmd.action == Action::agent);
  CHECK(cmd.options.log_level == "trace");

  for (const auto& line : {"--help", "-h", "check --help", "-np 2 --help", "run -h"}) {
    INFO("args: " << line);
    cmd = parse_command_line(split(line));
    CHECK(cmd.action == Action::help);
    CHECK(cmd.help_text == hvdrun::cli::help_text());
  }
  // --help after the command belongs to the command.
  CHECK(parse_command_line(split("-np 1 python --help")).action == Action::run);

  cmd = parse_command_line(split("--version"));
  CHECK(cmd.action == Action::version);
  CHECK(cmd.help_text.rfind("hvdrun ", 0) == 0);

  CHECK(parse_command_line(split("--check-build")).action == Action::check_build);
  CHECK(parse_command_line(split("--check-build --verbose")).action == Action::check_build);
}

TEST_CASE("bad command lines are usage errors with one precise line") {
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"",
       "no command to run; expected hvdrun [options] command [args...], as in hvdrun -np 4 "
       "python train.py (see hvdrun --help)"},
      {"-np 2",
       "no command to run; expected hvdrun [options] command [args...], as in hvdrun -np "
       "4 python train.py (see hvdrun --help)"},
      {"run",
       "no command to run; expected hvdrun [options] command [args...], as in hvdrun -np 4 "
       "python train.py (see hvdrun --help)"},
      {"--launcher rsh x",
       "bad value 'rsh' for --launcher; expected auto, ssh, slurm or exec:COMMAND (e.g. "
       "exec:docker exec -i {host})"},
      {"--launcher exec: x",
       "--launcher exec: needs a command after 'exec:'; expected e.g. --launcher 'exec:docker "
       "exec -i {host}'"},
      {"--launcher exec:ssh -np 1 x",
       "--launcher 'exec:ssh': the command has no {host}; put {host} where the host name goes, "
       "as in exec:docker exec -i {host}"},
      {"--ranks-filter 3-1 x",
       "bad value '3-1' for --ranks-filter: '3-1' runs backwards; expected ranks and ranges "
       "such as 0,3-5"},
      {"--ranks-filter 0,,2 x",
       "bad value '0,,2' for --ranks-filter: '' is not a rank; expected ranks and ranges such as "
       "0,3-5"},
      {"--ranks-filter -1 x",
       "bad value '-1' for --ranks-filter: '' is not a rank; expected ranks and ranges such as "
       "0,3-5"},
      {"--local-ranks-filter 1-0 x",
       "bad value '1-0' for --local-ranks-filter: '1-0' runs backwards; expected ranks and "
       "ranges such as 0,3-5"},
      {"--timeout 0 x",
       "bad value '0' for --timeout; expected whole seconds from 1 to 31622400, as in --timeout "
       "3600"},
      {"--timeout 1.5 x",
       "bad value '1.5' for --timeout; expected whole seconds from 1 to 31622400, as in "
       "--timeout 3600"},
      {"-np 4x x",
       "bad value '4x' for -np; expected a whole number of processes from 1 to 1048576, as in -np "
       "4"},
      {"-np 0 x",
       "bad value '0' for -np; expected a whole number of processes from 1 to 1048576, as in -np "
       "4"},
      {"-np 1048577 x",
       "bad value '1048577' for -np; expected a whole number of processes from 1 to 1048576, as "
       "in -np 4"},
      {"-np 99999999999999999999 x",
       "bad value '99999999999999999999' for -np; expected a whole number of processes from 1 to "
       "1048576, as in -np 4"},
      {"-np +4 x",
       "bad value '+4' for -np; expected a whole number of processes from 1 to 1048576, as in -np "
       "4"},
      {"-np", "-np needs a value; expected -np N"},
      {"-np --verbose x", "-np needs a value; expected -np N"},
      {"--num-proc", "--num-proc needs a value; expected --num-proc N"},
      {"-np= x", "-np needs a non-empty value; expected -np N"},
      {"-np 2 -np 3 x", "-np is given more than once; expected it once"},
      {"-np 2 --num-proc 3 x", "-np is given more than once; expected it once"},
      {"-H a -H b x", "-H/--hosts is given more than once; expected it once"},
      {"--verbose --verbose -np 1 x", "--verbose is given more than once; expected it once"},
      {"-p 70000 -np 1 x",
       "bad value '70000' for -p/--ssh-port; expected a port number from 1 to 65535, as in -p "
       "2222"},
      {"-p 0 -np 1 x",
       "bad value '0' for -p/--ssh-port; expected a port number from 1 to 65535, as in -p 2222"},
      {"-p ssh -np 1 x",
       "bad value 'ssh' for -p/--ssh-port; expected a port number from 1 to 65535, as in -p "
       "2222"},
      {"--start-timeout 0 -np 1 x",
       "bad value '0' for --start-timeout; expected whole seconds from 1 to 86400, as in "
       "--start-timeout 60"},
      {"--start-timeout 1.5 -np 1 x",
       "bad value '1.5' for --start-timeout; expected whole seconds from 1 to 86400, as in "
       "--start-timeout 60"},
      {"--hots a x", "unknown option '--hots'; did you mean --hosts? (see hvdrun --help)"},
      {"--np 2 x", "unknown option '--np'; did you mean -np? (see hvdrun --help)"},
      {"-n 2 x", "unknown option '-n'; did you mean -np? (see hvdrun --help)"},
      {"--verbos -np 1 x",
       "unknown option '--verbos'; did you mean --verbose? (see hvdrun --help)"},
      {"--glow -np 1 x", "unknown option '--glow'; did you mean --gloo? (see hvdrun --help)"},
      {"-z -np 1 x", "unknown option '-z'; see hvdrun --help for the options"},
      {"-hx -np 1 x", "unknown option '-hx'; see hvdrun --help for the options"},
      {"--verbose=yes -np 1 x", "--verbose takes no value; got '--verbose=yes'"},
      {"-H a:2 --hostfile h x",
       "-H and --hostfile cannot be used together; give the hosts one way"},
      {"-H a,,b x",
       "-H: empty entry 2 in 'a,,b'; expected host[:slots][,host[:slots]...] with no empty items "
       "between commas"},
      {"-np 9 -H localhost:4,node1:4 x",
       "-np 9 but the hosts have 8 slots (localhost:4, node1:4); lower -np or add slots"},
      {"-x 1A=2 -np 1 x",
       "bad value '1A=2' for -x/--env; expected NAME or NAME=VALUE where NAME has letters, digits "
       "and '_' and does not start with a digit"},
      {"-x =v -np 1 x",
       "bad value '=v' for -x/--env; expected NAME or NAME=VALUE where NAME has letters, digits "
       "and '_' and does not start with a digit"},
      {"-x A-B -np 1 x",
       "bad value 'A-B' for -x/--env; expected NAME or NAME=VALUE where NAME has letters, digits "
       "and '_' and does not start with a digit"},
      {"--log-level loud -np 1 x",
       "bad value 'loud' for --log-level; expected trace, debug, info, warning, error, critical "
       "or off"},
      {"--network-interface eth0/1 -np 1 x",
       "bad value 'eth0/1' for --network-interface; expected an interface name such as eth0"},
      {"--json -np 1 x",
       "--json needs --dry-run when running a job; add --dry-run, or use --json with hvdrun check"},
      {"check -H a x",
       "'hvdrun check' takes no command (got 'x'); it only checks the hosts, run the job with "
       "hvdrun [options] command"},
      {"check --output-filename d",
       "--output-filename does not apply to 'hvdrun check'; see hvdrun --help for the options it "
       "takes"},
      {"check -x A=1",
       "-x/--env does not apply to 'hvdrun check'; see hvdrun --help for the options it takes"},
      {"check --check-build",
       "--check-build does not apply to 'hvdrun check'; see hvdrun --help for the options it "
       "takes"},
      {"agent -np 2",
       "'hvdrun agent' is started by hvdrun itself and accepts only --log-level and --topology; "
       "got -np"},
      {"agent --verbose",
       "'hvdrun agent' is started by hvdrun itself and accepts only --log-level and --topology; "
       "got --verbose"},
      {"agent x", "'hvdrun agent' takes no arguments; got 'x' (it is started by hvdrun itself)"},
      {"--check-build -np 2", "--check-build takes no other options; got -np"},
      {"--check-build x", "--check-build takes no command; got 'x'"},
      {"--hostfile= x", "--hostfile needs a non-empty value; expected --hostfile FILE"},
      // -h for -H: asking for help, the job would print it and exit 0.
      {"-h localhost:2 python train.py",
       "-h prints the help and takes no value; got 'localhost:2'. For hosts write -H "
       "'localhost:2' (upper-case H)"},
      {"-np 2 -h node1:1,node2:1 x",
       "-h prints the help and takes no value; got 'node1:1,node2:1'. For hosts write -H "
       "'node1:1,node2:1' (upper-case H)"},
      // What the user typed is quoted, control bytes escaped, so the message stays one line.
      {"-h node\x01:1 x",
       "-h prints the help and takes no value; got 'node\\x01:1'. For hosts write -H "
       "'node\\x01:1' (upper-case H)"},
  };
  for (const auto& c : cases) {
    INFO("args: " << c.line);
    CHECK(error_of(split(c.line)) == c.message);
  }
}

TEST_CASE("the hostfile option is read and its errors keep file:line") {
  char path[] = "/tmp/hvdrun-cli-hosts-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream out(path);
    out << "# two servers\nserver1 slots=4\nserver2 slots=4\n";
  }
  auto cmd = parse_command_line({"--hostfile", path, "python", "train.py"});
  CHECK(cmd.options.hosts == std::vector<HostSlots>{{"server1", 4}, {"server2", 4}});
  CHECK_FALSE(cmd.options.np.has_value());
  {
    std::ofstream out(path);
    out << "server1 slots=4\nserver2 slots=four\n";
  }
  CHECK(error_of({"--hostfile", path, "x"}) ==
        std::string(path) +
            ":2: bad slot count 'four' for host 'server2'; expected a whole number from 1 to "
            "65536, as in server2 slots=4");
  std::remove(path);
  CHECK(error_of({"--hostfile", path, "x"}) ==
        "--hostfile '" + std::string(path) +
            "': cannot open: No such file or directory; expected a readable file with one host "
            "per line");
}

TEST_CASE("help lists every option and fits 80 columns") {
  const std::string help = hvdrun::cli::help_text();
  std::istringstream in(help);
  std::string line;
  while (std::getline(in, line)) {
    INFO("line: " << line);
    CHECK(line.size() <= 80);
  }
  for (const char* opt : {"-np",
                          "--num-proc",
                          "-H, --hosts",
                          "--hostfile",
                          "-p, --ssh-port",
                          "-i, --ssh-identity-file",
                          "--ssh-config",
                          "--start-timeout",
                          "--network-interface",
                          "--output-filename",
                          "-x, --env",
                          "--verbose",
                          "--log-level",
                          "--prefix-output-with-timestamp",
                          "--remote-hvdrun",
                          "--json",
                          "--check-build",
                          "--version",
                          "-h, --help",
                          "check",
                          "agent"}) {
    INFO("option: " << opt);
    CHECK(help.find(opt) != std::string::npos);
  }
}

TEST_CASE("horovodrun's tuning flags become the variables horovodrun sets") {
  auto cmd = parse_command_line(
      split("--gloo --disable-cache -np 2 --fusion-threshold-mb 64 --cycle-time-ms 2.5 "
            "--cache-capacity 2048 --hierarchical-allreduce --no-hierarchical-allgather "
            "--autotune --autotune-log-file /tmp/at.csv --autotune-warmup-samples 3 "
            "--autotune-steps-per-sample 10 --autotune-bayes-opt-max-samples 20 "
            "--autotune-gaussian-process-noise 0.8 --timeline-filename /tmp/tl.json "
            "--timeline-mark-cycles --no-stall-check --stall-check-warning-time-seconds 60 "
            "--stall-check-shutdown-time-seconds 0 --num-nccl-streams 2 --thread-affinity 1 "
            "--gloo-timeout-seconds 45 --tcp --log-without-timestamp -x HOROVOD_CYCLE_TIME=7 "
            "python train.py"));
  const std::vector<std::string> want = {
      "HOROVOD_FUSION_THRESHOLD=67108864",
      "HOROVOD_CYCLE_TIME=2.5",
      "HOROVOD_CACHE_CAPACITY=2048",
      "HOROVOD_HIERARCHICAL_ALLREDUCE=1",
      "HOROVOD_HIERARCHICAL_ALLGATHER=0",
      "HOROVOD_AUTOTUNE=1",
      "HOROVOD_AUTOTUNE_LOG=/tmp/at.csv",
      "HOROVOD_AUTOTUNE_WARMUP_SAMPLES=3",
      "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE=10",
      "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=20",
      "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.8",
      "HOROVOD_TIMELINE=/tmp/tl.json",
      "HOROVOD_TIMELINE_MARK_CYCLES=1",
      "HOROVOD_STALL_CHECK_DISABLE=1",
      "HOROVOD_STALL_CHECK_TIME_SECONDS=60",
      "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=0",
      "HOROVOD_NUM_NCCL_STREAMS=2",
      "HOROVOD_THREAD_AFFINITY=1",
      "HOROVOD_GLOO_TIMEOUT_SECONDS=45",
      "NCCL_IB_DISABLE=1",
      "HOROVOD_LOG_HIDE_TIME=1",
      // -x comes after the flags, so the user's explicit value wins in the rank.
      "HOROVOD_CYCLE_TIME=7",
  };
  CHECK(cmd.options.env == want);
  CHECK(cmd.options.command == Args{"python", "train.py"});

  // horovodrun's single-dash spellings.
  cmd = parse_command_line(split("-np 1 -prefix-timestamp true"));
  CHECK(cmd.options.prefix_timestamp);
  CHECK(parse_command_line(split("-cb")).action == Action::check_build);
  CHECK(parse_command_line(split("-v")).action == Action::version);

  // The switches horovodrun keeps out of its --help set what it sets.
  cmd = parse_command_line(
      split("-np 1 --torus-allreduce --no-autotune --no-timeline-mark-cycles --stall-check "
            "--log-with-timestamp true"));
  CHECK(cmd.options.env ==
        std::vector<std::string>{"HOROVOD_TORUS_ALLREDUCE=1", "HOROVOD_AUTOTUNE=0",
                                 "HOROVOD_TIMELINE_MARK_CYCLES=0", "HOROVOD_STALL_CHECK_DISABLE=0",
                                 "HOROVOD_LOG_HIDE_TIME=0"});
  CHECK(parse_command_line(split("-np 1 --no-torus-allreduce --log-hide-timestamp true"))
            .options.env ==
        std::vector<std::string>{"HOROVOD_TORUS_ALLREDUCE=0", "HOROVOD_LOG_HIDE_TIME=1"});
  CHECK(parse_command_line(split("-np 1 --no-log-hide-timestamp true")).options.env ==
        std::vector<std::string>{"HOROVOD_LOG_HIDE_TIME=0"});
}

TEST_CASE("horovodrun flags that cannot apply say what to do instead") {
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--mpi -np 2 x",
       "horovodrun's --mpi is not supported: hvdrun has no MPI controller; drop --mpi (Horovod "
       "programs run in gloo mode)"},
      {"-np 2 --mpi-threads-disable x",
       "horovodrun's --mpi-threads-disable is not supported: hvdrun does not use MPI; drop "
       "--mpi-threads-disable"},
      {"-np 2 --fusion-threshold-mb 1.5 x",
       "bad value '1.5' for --fusion-threshold-mb; expected a whole number from 0, as in "
       "--fusion-threshold-mb 64"},
      {"-np 2 --cycle-time-ms -1 x",
       "bad value '-1' for --cycle-time-ms; expected a number from 0, as in --cycle-time-ms 2.5"},
      {"-np 2 --cycle-time-ms 1.2.3 x",
       "bad value '1.2.3' for --cycle-time-ms; expected a number from 0, as in --cycle-time-ms "
       "2.5"},
      {"-np 2 --autotune-gaussian-process-noise 1.5 x",
       "bad value '1.5' for --autotune-gaussian-process-noise; expected a number from 0 to 1, as "
       "in --autotune-gaussian-process-noise 0.8"},
      {"-np 2 --hierarchical-allreduce --no-hierarchical-allreduce x",
       "--hierarchical-allreduce and --no-hierarchical-allreduce cannot be used together; give "
       "one of them"},
      {"-np 2 --no-stall-check --stall-check x",
       "--no-stall-check and --stall-check cannot be used together; give one of them"},
      {"-np 2 --log-without-timestamp --log-hide-timestamp x",
       "--log-without-timestamp and --log-hide-timestamp cannot be used together; give one of "
       "them"},
      {"-np 2 --no-mpi-threads-disable x",
       "horovodrun's --no-mpi-threads-disable is not supported: hvdrun does not use MPI; drop "
       "--no-mpi-threads-disable"},
      {"check -H a --autotune",
       "--autotune does not apply to 'hvdrun check'; see hvdrun --help for the options it takes"},
      // mpirun's habit: refused with where more ranks per host come from in hvdrun.
      {"-np 8 --oversubscribe -H a:2 x",
       "mpirun's --oversubscribe is not supported: hvdrun runs one rank per slot; give the hosts "
       "more slots (-H node1:8, or 'node1 slots=8' in the hostfile) to run more ranks on them"},
      {"-oversubscribe -np 8 x",
       "mpirun's -oversubscribe is not supported: hvdrun runs one rank per slot; give the hosts "
       "more slots (-H node1:8, or 'node1 slots=8' in the hostfile) to run more ranks on them"},
  };
  for (const auto& c : cases) {
    INFO("args: " << c.line);
    CHECK(error_of(split(c.line)) == c.message);
  }
}

TEST_CASE("horovodrun's elastic flags turn elastic mode on, with their bounds checked") {
  auto cmd = parse_command_line(
      split("-np 2 --min-np 1 --max-np 4 --host-discovery-script ./d.sh --slots-per-host 2 "
            "--reset-limit 3 --blacklist-cooldown-range 5 60 --elastic-timeout 30 python t.py"));
  const auto& e = cmd.options.elastic;
  CHECK(e.enabled());
  CHECK(e.discovery_script == "./d.sh");
  CHECK(e.min_np == 1);
  CHECK(e.max_np == 4);
  CHECK(e.slots_per_host == 2);
  CHECK(e.reset_limit == 3);
  CHECK(e.cooldown_min_s == 5);
  CHECK(e.cooldown_max_s == 60);
  CHECK(e.elastic_timeout_s == 30);
  CHECK(cmd.options.command == Args{"python", "t.py"});
  // horovodrun's second names of --min-np and --max-np.
  cmd = parse_command_line(
      split("-np 2 --min-num-proc 1 --max-num-proc=4 --host-discovery-script ./d.sh x"));
  CHECK(cmd.options.elastic.min_np == 1);
  CHECK(cmd.options.elastic.max_np == 4);

  // torchrun's --max-restarts alone: restarts on the same hosts, at least one rank.
  cmd = parse_command_line(split("-np 2 --max-restarts 2 x"));
  CHECK(cmd.options.elastic.enabled());
  CHECK(cmd.options.elastic.reset_limit == 2);
  CHECK(cmd.options.elastic.reset_limit_flag == "--max-restarts");  // messages name it so
  CHECK(cmd.options.elastic.min_np == 1);
  // ... and at its size: the restarted job is the same job, with no more ranks than -np.
  CHECK(parse_command_line(split("-np 2 -H a:4 --max-restarts 2 x")).options.elastic.max_np == 2);
  CHECK(parse_command_line(split("-np 2 --reset-limit 2 x")).options.elastic.reset_limit_flag ==
        "--reset-limit");
  // --min-np alone: the size defaults to... -np, else min-np.
  cmd = parse_command_line(split("--min-np 2 -H a:2,b:2 x"));
  CHECK(cmd.options.elastic.min_np == 2);
  CHECK(!parse_command_line(split("-np 2 x")).options.elastic.enabled());

  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"-np 2 --max-np 4 x",
       "elastic options need elastic mode; add --min-np N or --host-discovery-script PATH"},
      {"-np 1 --min-np 2 x",
       "-np 1 is outside --min-np 2 .. --max-np (no limit); expected min-np <= -np <= max-np"},
      {"--min-np 3 --max-np 2 x",
       "--min-np 3 is above --max-np 2; expected min-np <= -np <= max-np"},
      {"--min-np 1 --blacklist-cooldown-range 9 x",
       "bad value '9' for --blacklist-cooldown-range; expected two whole numbers of seconds, "
       "MIN then MAX (MIN <= MAX), as in --blacklist-cooldown-range 10 300"},
      {"--min-np 1 --blacklist-cooldown-range 9 3 x",
       "bad value '9 3' for --blacklist-cooldown-range; expected two whole numbers of seconds, "
       "MIN then MAX (MIN <= MAX), as in --blacklist-cooldown-range 10 300"},
      {"--host-discovery-script d.sh -H a x",
       "--host-discovery-script and -H/--hostfile cannot be used together; the script says "
       "which hosts there are"},
      {"-np 2 --reset-limit 1 --max-restarts 1 x",
       "--reset-limit and --max-restarts are the same limit; give one of them"},
      {"-np 2 --max-restarts x1 x",
       "bad value 'x1' for --max-restarts; expected a whole number from 0 to 1000000, as in "
       "--max-restarts 3"},
  };
  for (const auto& c : cases) {
    INFO("args: " << c.line);
    CHECK(error_of(split(c.line)) == c.message);
  }
}

TEST_CASE("launcher and dry-run flags parse into the options") {
  auto cmd = parse_command_line(
      {"--launcher", "exec:sh -c 'exec \"$@\"' {host}", "--dry-run", "--json", "true"});
  CHECK(cmd.options.launcher.kind == hvdrun::launcher::LauncherChoice::exec);
  CHECK(cmd.options.launcher.exec_argv ==
        std::vector<std::string>{"sh", "-c", "exec \"$@\"", "{host}"});
  CHECK(cmd.options.dry_run);
  CHECK(cmd.options.json);
  CHECK(parse_command_line(split("--launcher slurm x")).options.launcher.kind ==
        hvdrun::launcher::LauncherChoice::slurm);
  CHECK(parse_command_line(split("x")).options.launcher.kind ==
        hvdrun::launcher::LauncherChoice::automatic);
  // Without -np or hosts the command parses: the launch plan looks for an allocation.
  CHECK(parse_command_line(split("python train.py")).options.command.size() == 2);
  CHECK(error_of({"--launcher", "exec:sh -c 'x {host}", "-np", "1", "x"}) ==
        "--launcher: unclosed ' in 'sh -c 'x {host}'; close the quote");
}

TEST_CASE("check --topology reports this machine, or each host given") {
  const Command cmd = parse_command_line(split("check --topology --json"));
  CHECK(cmd.action == Action::check);
  CHECK(cmd.options.topology);
  CHECK(cmd.options.json);
  CHECK_FALSE(parse_command_line(split("check")).options.topology);
  const Command hosts = parse_command_line(split("check --topology -H node1,node2"));
  CHECK(hosts.options.topology);
  CHECK(hosts.options.hosts.size() == 2);
  // The probe each SSH host runs for it.
  CHECK(parse_command_line(split("agent --topology")).action == Action::agent_topology);
  CHECK(parse_command_line(split("agent")).action == Action::agent);
  CHECK(error_of({"--topology", "true"}) ==
        "--topology applies only to 'hvdrun check'; expected hvdrun check --topology [options]");
}

TEST_CASE("binding flags parse strictly") {
  const Command cmd = parse_command_line(
      split("--bind-to numa --map-by socket --cpus-per-rank 4 --report-bindings x"));
  CHECK(cmd.options.placement.bind_to == hvdrun::launcher::BindTo::numa);
  CHECK(cmd.options.placement.map_by == hvdrun::launcher::MapBy::socket);
  CHECK(cmd.options.placement.cpus_per_rank == 4);
  CHECK(cmd.options.report_bindings);
  CHECK(parse_command_line(split("x")).options.placement.bind_to == hvdrun::launcher::BindTo::none);
  CHECK((cmd.options.bind_to_given && !parse_command_line(split("x")).options.bind_to_given));
  CHECK(parse_command_line(split("--bind-to none x")).options.bind_to_given);  // no default
  CHECK(error_of({"--bind-to", "board", "x"}) ==
        "bad value 'board' for --bind-to; expected none, core, l3, numa or socket");
  CHECK(error_of({"--bind-to", "core", "--map-by", "node", "x"}) ==
        "bad value 'node' for --map-by; expected slot, numa or socket");
  CHECK(error_of({"--map-by", "numa", "x"}) ==
        "--map-by and --cpus-per-rank apply only when binding; add --bind-to core (or l3, numa, "
        "socket)");
  CHECK(error_of({"--bind-to", "core", "--cpus-per-rank", "0", "x"}).find("--cpus-per-rank") !=
        std::string::npos);
  CHECK(error_of({"check", "--bind-to", "core"}) ==
        "--bind-to does not apply to 'hvdrun check'; see hvdrun --help for the options it takes");
}

TEST_CASE("GPU and NIC flags parse strictly") {
  const Command cmd = parse_command_line(
      split("--gpus-per-rank 2 --network-interfaces ib0,eth0 -H a:4,b:4 --include a:0,1@b x"));
  CHECK(cmd.options.placement.gpus_per_rank == 2);
  CHECK(cmd.options.network_interfaces == std::vector<std::string>{"ib0", "eth0"});
  CHECK(cmd.options.include == "a:0,1@b");
  CHECK(error_of({"--gpus-per-rank", "x", "y"}).find("--gpus-per-rank") != std::string::npos);
  CHECK(error_of({"-H", "a,b", "--include", "a", "--exclude", "b", "x"}) ==
        "--include and --exclude were both given; give one of them");
  CHECK(error_of({"--network-interfaces", "ib0,,eth0", "x"}) ==
        "bad value 'ib0,,eth0' for --network-interfaces; expected interface names separated by "
        "commas, as ib0,eth0");
  CHECK(error_of({"--network-interface", "lo", "--network-interfaces", "lo", "x"})
            .find("were both given") != std::string::npos);
  // The filter is checked against the hosts with -np before anything starts.
  CHECK(error_of({"-H", "a:2,b:2", "--exclude", "c", "x"}) ==
        "--exclude: host 'c' is not in the host list (a,b); name a host of -H, the hostfile or "
        "the allocation");
  CHECK(error_of({"-np", "3", "-H", "a:2,b:2", "--include", "a", "x"}).find("-np") !=
        std::string::npos);
  CHECK(error_of({"--min-np", "1", "-H", "a:2", "--include", "a", "x"}) ==
        "--include and --exclude do not apply in elastic mode; give the hosts to use");
}
