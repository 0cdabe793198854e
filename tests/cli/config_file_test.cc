// --config-file (horovodrun's YAML of Horovod settings), --env-file and -x patterns: Horovod's
// own config example gives the variables horovodrun's config parser sets from it, the command
// line wins over the file, every bad key, value or line is named by file and line, and one
// real local job shows the variables reaching a rank.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cli/env_options.h"
#include "cli/options.h"
#include "common/error.h"
#include "compat/horovod_config.h"
#include "compat/yaml_subset.h"
#include "tests/support/processes.h"

using hvdrun::UsageError;
using hvdrun::cli::parse_command_line;
using hvdrun::compat::horovod_config_env;

namespace {

using Args = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

Env as_map(const std::vector<std::string>& entries) {
  Env m;
  for (const auto& e : entries) m[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  return m;
}

std::string config_error(const std::string& text, const std::string& file = "c.yaml") {
  try {
    horovod_config_env(text, file, {});
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

std::string env_file_error(const std::string& text) {
  try {
    hvdrun::cli::parse_env_file(text, "job.env");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

// The keys and values of Horovod's own example config (test/single/data/config.test.yaml in
// Horovod's repository, the one its test_config_file reads), laid out with comments.
const char* const kHorovodExample = R"(# Horovod's example settings
controller: gloo

params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: true

autotune:
  enabled: true
  log_file: 'horovod_autotune_log.txt'
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9

timeline:
  filename: 'horovod_timeline.json'
  mark_cycles: true

stall_check:
  enabled: true
  warning_time_seconds: 120
  shutdown_time_seconds: 240

library_options:
  mpi_threads_disable: true
  num_nccl_streams: 2
  thread_affinity: 1
  gloo_timeout_seconds: 60


logging:
  level: INFO
  hide_timestamp: true
)";

}  // namespace

TEST_CASE("Horovod's example config file sets the variables horovodrun's config parser sets") {
  hvdrun::testing::TempDir dir("config");
  const std::string file = dir.path() + "/horovod.yaml";
  hvdrun::testing::write_text(file, kHorovodExample);
  const auto cmd = parse_command_line({"-np", "2", "--config-file", file, "python", "t.py"});
  // config_parser.set_env_from_args over the args its set_args_from_config makes of the file:
  // MiB to bytes, booleans to 1/0, stall_check.enabled negated.
  const Env want = {
      {"HOROVOD_FUSION_THRESHOLD", "33554432"},
      {"HOROVOD_CYCLE_TIME", "10"},
      {"HOROVOD_CACHE_CAPACITY", "2048"},
      {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
      {"HOROVOD_HIERARCHICAL_ALLGATHER", "1"},
      {"HOROVOD_AUTOTUNE", "1"},
      {"HOROVOD_AUTOTUNE_LOG", "horovod_autotune_log.txt"},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "20"},
      {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "50"},
      {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.9"},
      {"HOROVOD_TIMELINE", "horovod_timeline.json"},
      {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
      {"HOROVOD_STALL_CHECK_DISABLE", "0"},
      {"HOROVOD_STALL_CHECK_TIME_SECONDS", "120"},
      {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "240"},
      {"HOROVOD_MPI_THREADS_DISABLE", "1"},
      {"HOROVOD_NUM_NCCL_STREAMS", "2"},
      {"HOROVOD_THREAD_AFFINITY", "1"},
      {"HOROVOD_GLOO_TIMEOUT_SECONDS", "60"},
      {"HOROVOD_LOG_LEVEL", "INFO"},
      // The one difference: horovodrun's parser reads logging.with_timestamp and ignores this
      // key of its own example; hvdrun does what it says.
      {"HOROVOD_LOG_HIDE_TIME", "1"},
  };
  CHECK(cmd.options.env.size() == want.size());
  CHECK(as_map(cmd.options.env) == want);
}

TEST_CASE("flags on the command line win over the config file and -x over both") {
  hvdrun::testing::TempDir dir("config");
  const std::string file = dir.path() + "/horovod.yaml";
  hvdrun::testing::write_text(file, kHorovodExample);
  // Horovod's test_config_file_override_args, and the docs' --no-hierarchical-allgather.
  const auto cmd = parse_command_line({"-np", "2", "--fusion-threshold-mb", "256", "--config-file",
                                       file, "--cycle-time-ms", "20", "--no-hierarchical-allgather",
                                       "-x", "HOROVOD_CACHE_CAPACITY=7", "x"});
  const auto& env = cmd.options.env;
  const Env got = as_map(env);
  CHECK(got.at("HOROVOD_FUSION_THRESHOLD") == "268435456");
  CHECK(got.at("HOROVOD_CYCLE_TIME") == "20");
  CHECK(got.at("HOROVOD_HIERARCHICAL_ALLGATHER") == "0");
  CHECK(got.at("HOROVOD_HIERARCHICAL_ALLREDUCE") == "1");  // from the file
  // The file's value of a flag given is left out, not merely overwritten.
  CHECK(std::count(env.begin(), env.end(), "HOROVOD_CYCLE_TIME=10") == 0);
  CHECK(std::count(env.begin(), env.end(), "HOROVOD_FUSION_THRESHOLD=33554432") == 0);
  // -x comes last, so it wins in the rank over the file's HOROVOD_CACHE_CAPACITY=2048.
  CHECK(env.back() == "HOROVOD_CACHE_CAPACITY=7");
}

TEST_CASE("autotune and timeline settings apply only when horovodrun would apply them") {
  const std::string text =
      "autotune:\n  enabled: false\n  warmup_samples: 5\n"
      "timeline:\n  mark_cycles: true\n"
      "stall_check:\n  enabled: off\n"
      "logging:\n  with_timestamp: yes\n";
  CHECK(as_map(horovod_config_env(text, "c.yaml", {})) ==
        Env{{"HOROVOD_STALL_CHECK_DISABLE", "1"}, {"HOROVOD_LOG_HIDE_TIME", "0"}});
  // --autotune and --timeline-filename on the command line turn the file's settings on.
  const auto env = as_map(
      horovod_config_env(text, "c.yaml", {{"autotune", ""}, {"timeline-filename", "/tmp/t.json"}}));
  CHECK(env.at("HOROVOD_AUTOTUNE_WARMUP_SAMPLES") == "5");
  CHECK(env.at("HOROVOD_TIMELINE_MARK_CYCLES") == "1");
  CHECK(env.count("HOROVOD_AUTOTUNE") == 0);  // set by the flag itself
  // --no-autotune turns the file's autotune off, settings and all, as horovodrun's does.
  CHECK(as_map(horovod_config_env("autotune:\n  enabled: true\n  warmup_samples: 5\n", "c.yaml",
                                  {{"no-autotune", ""}})) == Env{});
}

TEST_CASE("the YAML subset: comments quotes nulls and a document marker") {
  const auto entries = hvdrun::compat::parse_yaml_subset(
      "---\r\n# top\ncontroller: \"gloo\"  # quoted\ntimeline:\n    filename: 'it''s #1.json'\n"
      "    mark_cycles: ~\nparams:\n",
      "c.yaml");
  REQUIRE(entries.size() == 5);
  CHECK(entries[0].value == "gloo");
  CHECK(entries[0].quoted);
  CHECK(entries[1].is_section);
  CHECK(entries[2].section == "timeline");
  CHECK(entries[2].value == "it's #1.json");
  CHECK(entries[2].line == 5);
  CHECK(entries[3].null);
  CHECK(entries[4].null);  // a section with no keys is nothing
  CHECK(as_map(horovod_config_env("timeline:\n  filename: \"a\\tb.json\"\n", "c.yaml", {})) ==
        Env{{"HOROVOD_TIMELINE", "a\tb.json"}});
}

TEST_CASE("a bad key value or line in the config file names the file and line") {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"params:\n  fusion_threshold: 64\n",
       "c.yaml:2: unknown key 'fusion_threshold' in section params; expected one of "
       "fusion_threshold_mb, cycle_time_ms, cache_capacity, hierarchical_allreduce, "
       "hierarchical_allgather, torus_allreduce (see hvdrun(1), CONFIGURATION FILE)"},
      {"# c\nnp: 4\n",
       "c.yaml:2: unknown key 'np'; expected controller, params, autotune, timeline, "
       "stall_check, library_options, logging (see hvdrun(1), CONFIGURATION FILE)"},
      {"controller: mpi\n",
       "c.yaml:1: controller: mpi is not supported: hvdrun has no MPI controller and runs Horovod "
       "programs in gloo mode; write controller: gloo or remove the line"},
      {"params:\n  cycle_time_ms: fast\n",
       "c.yaml:2: bad value 'fast' for params.cycle_time_ms; expected a number from 0, as in "
       "'cycle_time_ms: 3.5'"},
      {"params:\n  fusion_threshold_mb: '64'\n",
       "c.yaml:2: bad value '64' (quoted) for params.fusion_threshold_mb; expected a whole number "
       "from 0, without quotes, as in 'fusion_threshold_mb: 64'"},
      {"params:\n  hierarchical_allreduce: 1\n",
       "c.yaml:2: bad value '1' for params.hierarchical_allreduce; expected true or false, "
       "without quotes, as in 'hierarchical_allreduce: true'"},
      {"autotune:\n  gaussian_process_noise: 1.5\n",
       "c.yaml:2: bad value '1.5' for autotune.gaussian_process_noise; expected a number from 0 "
       "to 1, as in 'gaussian_process_noise: 0.8'"},
      {"logging:\n  level: LOUD\n",
       "c.yaml:2: bad value 'LOUD' for logging.level; expected TRACE, DEBUG, INFO, WARNING, "
       "ERROR or FATAL, as in 'level: INFO'"},
      {"params: 64\n",
       "c.yaml:1: params is a section; put its keys on indented lines below 'params:', as in '  "
       "fusion_threshold_mb: ...'"},
      {"params:\n  fusion_threshold_mb 64\n",
       "c.yaml:2: expected 'key: value', got 'fusion_threshold_mb 64'; a key has letters, digits, "
       "'_', '-' and '.', and a space follows its colon"},
      {"params:\n\tcycle_time_ms: 1\n",
       "c.yaml:2: a tab in the indentation; YAML indents with spaces only"},
      {"params:\n  - cycle_time_ms: 1\n",
       "c.yaml:2: a list item; lists are not supported: hvdrun reads 'key: value' lines and "
       "sections of indented 'key: value' lines"},
      {"params:\n  cache_capacity:\n    x: 1\n",
       "c.yaml:3: nesting deeper than one section; hvdrun reads 'key: value' lines and sections "
       "of indented 'key: value' lines"},
      {"params:\n    cache_capacity: 1\n  cycle_time_ms: 1\n",
       "c.yaml:3: indentation of 'cycle_time_ms' differs from the section's first key; indent "
       "them alike"},
      {"controller: gloo\n  cycle_time_ms: 1\n",
       "c.yaml:2: unexpected indentation before 'cycle_time_ms'; indent only the keys of a "
       "section, under a line such as 'params:'"},
      {"params:\n  cache_capacity: 1\n  cache_capacity: 2\n",
       "c.yaml:3: 'params.cache_capacity' is given twice (lines 2 and 3); keep one"},
      {"timeline:\n  filename: 'open\n",
       "c.yaml:2: the quoted value ''open' does not end on its line; close the ' (values "
       "spanning lines are not read)"},
      {"params: {cycle_time_ms: 1}\n",
       "c.yaml:1: unsupported YAML value '{cycle_time_ms: 1}' for 'params' (lists, mappings, "
       "anchors, tags and block scalars are not read); write a plain or quoted scalar"},
      {"logging:\n  with_timestamp: true\n  hide_timestamp: true\n",
       "c.yaml:3: hide_timestamp and with_timestamp (line 2) both set HOROVOD_LOG_HIDE_TIME; "
       "keep one"},
  };
  for (const auto& c : cases) {
    INFO("config: " << c.text);
    CHECK(config_error(c.text) == c.message);
  }
}

TEST_CASE("env file lines become -x entries and a bad line names file and line") {
  CHECK(hvdrun::cli::parse_env_file(
            "# DeepSpeed's .deepspeed_env format\n\nNCCL_DEBUG=INFO\r\n  A=x=y z \nEMPTY=\n",
            "job.env") == std::vector<std::string>{"NCCL_DEBUG=INFO", "A=x=y z", "EMPTY="});
  CHECK(env_file_error("A=1\nexport B=2\n") ==
        "job.env:2: bad name 'export B' in 'export B=2'; expected KEY=VALUE where KEY has "
        "letters, digits and '_' and does not start with a digit");
  CHECK(env_file_error("\nJUST_A_NAME\n") ==
        "job.env:2: expected KEY=VALUE, got 'JUST_A_NAME'; to pass a variable of this shell, "
        "use -x JUST_A_NAME");
  CHECK(env_file_error("A=1\n# c\nA=2\n") == "job.env:3: A is set twice (lines 1 and 3); keep one");
  CHECK(env_file_error("=1\n") ==
        "job.env:1: bad name '' in '=1'; expected KEY=VALUE where KEY has letters, digits and '_' "
        "and does not start with a digit");
}

TEST_CASE("sources stack: config file then flags then env file then -x") {
  hvdrun::testing::TempDir dir("config");
  const std::string config = dir.path() + "/c.yaml";
  const std::string env_file = dir.path() + "/job.env";
  hvdrun::testing::write_text(config, "params:\n  cache_capacity: 1\n  cycle_time_ms: 2\n");
  hvdrun::testing::write_text(env_file, "HOROVOD_CYCLE_TIME=3\nMY_SETTING=a b\n");
  const auto cmd = parse_command_line({"--env-file", env_file, "-x", "TORCH_*", "--config-file",
                                       config, "--cache-capacity", "5", "-x", "MY_SETTING=c", "x"});
  CHECK(cmd.options.env == std::vector<std::string>{"HOROVOD_CYCLE_TIME=2",
                                                    "HOROVOD_CACHE_CAPACITY=5",
                                                    "HOROVOD_CYCLE_TIME=3", "MY_SETTING=a b",
                                                    "TORCH_*", "MY_SETTING=c"});
  struct Case {
    Args args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"-x", "*", "x"},
       "bad pattern '*' for -x/--env; expected a name prefix then '*', as in -x "
       "'TORCH_*'"},
      {{"-x", "TO-RCH_*", "x"},
       "bad pattern 'TO-RCH_*' for -x/--env; expected a name prefix then '*', as in -x 'TORCH_*'"},
      {{"-x", "A*=1", "x"},
       "bad value 'A*=1' for -x/--env; expected NAME or NAME=VALUE where NAME has letters, digits "
       "and '_' and does not start with a digit"},
      {{"--env-file", dir.path() + "/none", "x"},
       "--env-file '" + dir.path() +
           "/none': cannot open: No such file or directory; expected a readable file of "
           "KEY=VALUE lines"},
      {{"--config-file", dir.path(), "x"},
       "--config-file '" + dir.path() +
           "': a directory, not a regular file; expected a readable YAML file of Horovod "
           "settings"},
      {{"check", "--config-file", config},
       "--config-file does not apply to 'hvdrun check'; see hvdrun --help for the options it "
       "takes"},
  };
  for (const auto& c : cases) {
    INFO("args: " << c.args.front() << " " << c.args[1]);
    try {
      parse_command_line(c.args);
      FAIL("no error");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()) == c.message);
    }
  }
}

TEST_CASE(
    "a local job gets the config file the env file and -x patterns and a bad file is exit 2") {
  hvdrun::testing::TempDir dir("config");
  const std::string config = dir.path() + "/c.yaml";
  const std::string env_file = dir.path() + "/job.env";
  hvdrun::testing::write_text(config, "params:\n  fusion_threshold_mb: 8\n");
  hvdrun::testing::write_text(env_file, "FROM_ENV_FILE=yes\n");
  hvdrun::testing::Hvdrun ok(
      {"-np", "1", "--config-file", config, "--env-file", env_file, "-x", "CFGTEST_*", "sh", "-c",
       "echo \"$HOROVOD_FUSION_THRESHOLD $FROM_ENV_FILE $CFGTEST_A\""},
      {"CFGTEST_A=patterned"});
  CHECK(ok.wait() == 0);
  CHECK(ok.out == "[0]<stdout>:8388608 yes patterned\n");

  hvdrun::testing::write_text(config, "params:\n  fusion_threshold_mb: 8\n  bogus: 1\n");
  hvdrun::testing::Hvdrun bad({"-np", "1", "--config-file", config, "true"});
  CHECK(bad.wait() == 2);
  CHECK(bad.err.find(config + ":3: unknown key 'bogus' in section params") != std::string::npos);
}
