// Command-line parsing for `hvdrun`. One table describes every option (cli/option_table.h,
// which also makes the --help text from it). argv is first walked with that table to find
// where the options end and the user's command begins (`hvdrun -np 2 python train.py --lr 1`
// passes `--lr 1` to the command), then the option part goes through Boost.Program_options
// for strict storage (unknown and repeated options), and finally every value is checked.
#include "cli/options.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include <boost/program_options.hpp>

#include "cli/env_options.h"
#include "cli/join_options.h"
#include "cli/option_table.h"
#include "cli/rank_list.h"
#include "common/env_names.h"
#include "common/error.h"
#include "common/quote.h"
#include "common/version.h"
#include "common/whole_number.h"
#include "compat/horovod_flags.h"
#include "hostfile/hosts.h"
#include "hostfile/placement.h"
#include "hostfile/resource_filter.h"
#include "launcher/plan/launch_method.h"
#include "launcher/plan/rank_devices.h"

namespace hvdrun::cli {
namespace {

namespace po = boost::program_options;

constexpr int kMaxNp = env_names::kMaxRanks;
constexpr int kMaxStartTimeout = env_names::kMaxStartTimeoutS;
// --timeout: a year, far beyond any job, and far from overflowing the clock's arithmetic.
constexpr int kMaxJobTimeout = 366 * 24 * 3600;

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void unknown_option(std::string_view written) {
  std::string_view name = written.substr(0, written.find('='));
  if (std::string refused = compat::refused_flag_message(name); !refused.empty()) {
    throw UsageError(refused);
  }
  if (std::string advice = torchrun_flag_advice(std::string(name)); !advice.empty())
    throw UsageError(advice);
  std::string best;
  size_t best_d = 3;
  for (const auto& s : options()) {
    std::vector<std::string> forms = {std::string("--") + s.name};
    if (s.single_dash) forms.emplace_back("-np");
    for (const auto& f : forms) {
      size_t d = edit_distance(name, f);
      size_t limit = name.size() <= 4 ? 1 : 2;
      if (d <= limit && d < best_d) {
        best_d = d;
        best = f;
      }
    }
  }
  if (!best.empty()) {
    throw UsageError("unknown option " + quote(name) + "; did you mean " + best +
                     "? (see hvdrun --help)");
  }
  throw UsageError("unknown option " + quote(name) + "; see hvdrun --help for the options");
}

int number_option(const OptSpec& s, const std::string& text, long lo, long hi, const char* what,
                  const char* example) {
  auto v = parse_whole_number(text, lo, hi);
  if (!v) {
    throw UsageError("bad value " + quote(text) + " for " + shown(s) + "; expected " + what +
                     " from " + std::to_string(lo) + " to " + std::to_string(hi) + ", as in " +
                     example);
  }
  return static_cast<int>(*v);
}

const char* mode_name(unsigned mode) {
  switch (mode) {
    case kCheck:
      return "hvdrun check";
    case kAgent:
      return "hvdrun agent";
    default:
      return "hvdrun run";
  }
}

[[noreturn]] void wrong_mode(const OptSpec& s, unsigned mode) {
  if (mode == kRun && (s.modes & (kRun | kCheck)) == kCheck) {
    throw UsageError(shown(s) + " applies only to 'hvdrun check'; expected hvdrun check " +
                     shown(s) + " [options]");
  }
  if (mode == kAgent) {
    throw UsageError(
        "'hvdrun agent' is started by hvdrun itself and accepts only --log-level and "
        "--topology; got " +
        shown(s));
  }
  throw UsageError(shown(s) + " does not apply to '" + mode_name(mode) +
                   "'; see hvdrun --help for the options it takes");
}

// One option occurrence as found by the walk.
struct Found {
  const OptSpec* spec;
  std::optional<std::string> value;
};

// The subcommand (run when none is named), and where its options start.
unsigned subcommand(const std::vector<std::string>& args, size_t& first) {
  first = 0;
  if (args.empty()) return kRun;
  if (args[0] == "run" || args[0] == "check" || args[0] == "agent") first = 1;
  if (args[0] == "check") return kCheck;
  if (args[0] == "agent") return kAgent;
  return kRun;
}

// A token that names an option: its spec, a value written with it (`--name=value`,
// `-pVALUE`) and the form the user wrote, for messages.
struct Token {
  const OptSpec* spec = nullptr;
  std::optional<std::string> value;
  std::string written;
};

// The option `a` names; nullopt when `a` is not an option (the command starts there).
std::optional<Token> option_token(const std::string& a) {
  Token t;
  if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
    size_t eq = a.find('=');
    std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (auto alias = compat::horovod_long_alias(name); !alias.empty()) name = std::string(alias);
    for (const auto& s : options()) {
      if (name == s.name) t.spec = &s;
    }
    // torchrun spells its flags either way: --nproc_per_node is --nproc-per-node.
    if (!t.spec && name.find('_') != std::string::npos) {
      std::replace(name.begin(), name.end(), '_', '-');
      for (const auto& s : options()) {
        if (name == s.name) t.spec = &s;
      }
    }
    if (!t.spec) unknown_option(a);
    if (eq != std::string::npos) t.value = a.substr(eq + 1);
    t.written = "--" + name;
  } else if (std::string_view alias = compat::horovod_single_dash_alias(a.substr(0, a.find('=')));
             !alias.empty()) {
    t.spec = &spec_named(alias);
    if (a.find('=') != std::string::npos) t.value = a.substr(a.find('=') + 1);
    t.written = a.substr(0, a.find('='));
  } else if (a == "-np" || a.compare(0, 4, "-np=") == 0) {
    t.spec = &spec_named("num-proc");
    if (a.size() > 3) t.value = a.substr(4);
    t.written = "-np";
  } else if (a.size() >= 2 && a[0] == '-' && a[1] != '-') {
    for (const auto& s : options()) {
      if (s.short_name == a[1]) t.spec = &s;
    }
    if (!t.spec || (!t.spec->arg && a.size() > 2)) unknown_option(a);
    if (a.size() > 2) t.value = a.substr(a[2] == '=' ? 3 : 2);
    t.written = a.substr(0, 2);
  } else {
    return std::nullopt;
  }
  return t;
}

// argv taken apart: the options found, the user's command, and the answer to --help or
// --version when one of them came first.
struct Walk {
  std::vector<Found> found;
  std::vector<std::string> command;
  std::optional<Command> answer;
};

// Finds the options, their values, and where the command starts: at the first word that
// is not an option, or after `--`.
Walk walk(const std::vector<std::string>& args, size_t i, unsigned mode) {
  Walk w;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      w.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    std::optional<Token> t = option_token(a);
    if (!t) {
      w.command.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    const OptSpec& spec = *t->spec;
    // --help and --version answer in any mode; everything else must belong to it.
    if (!(spec.modes & mode)) wrong_mode(spec, mode);
    if (spec.arg && !t->value) {
      std::string example = t->written + " " + spec.arg;
      if (i + 1 >= args.size() ||
          (args[i + 1].size() > 2 && args[i + 1].compare(0, 2, "--") == 0)) {
        throw UsageError(t->written + " needs a value; expected " + example);
      }
      t->value = args[++i];
      // horovodrun's --blacklist-cooldown-range takes its two numbers as two words.
      if (std::strcmp(spec.name, "blacklist-cooldown-range") == 0 && i + 1 < args.size() &&
          t->value->find_first_of(" ,") == std::string::npos &&
          parse_whole_number(args[i + 1], 0, 999999999)) {
        *t->value += " " + args[++i];
      }
    } else if (!spec.arg && t->value) {
      throw UsageError(t->written + " takes no value; got " + quote(a));
    }
    if (t->value && t->value->empty()) {
      throw UsageError(t->written + " needs a non-empty value; expected " + t->written + " " +
                       spec.arg);
    }
    // `-h host:2` is a typo for -H: asking for help, it would print it and exit 0.
    if (t->written == "-h" && i + 1 < args.size() && !args[i + 1].empty() &&
        args[i + 1][0] != '-') {
      throw UsageError("-h prints the help and takes no value; got " + quote(args[i + 1]) +
                       ". For hosts write -H " + quote(args[i + 1]) + " (upper-case H)");
    }
    if (std::strcmp(spec.name, "help") == 0 || std::strcmp(spec.name, "version") == 0) {
      Command answer;
      const bool help = std::strcmp(spec.name, "help") == 0;
      answer.action = help ? Action::help : Action::version;
      answer.help_text = help ? help_text() : std::string(kVersionLine) + "\n";
      w.answer = std::move(answer);
      return w;
    }
    w.found.push_back(Found{&spec, t->value});
  }
  return w;
}

// Boost.Program_options stores the options strictly: a repeated single-valued option is
// an error. Every token is handed over as --name or --name=value, so a value that looks
// like an option (`-np -1`) reaches our own checks instead of confusing Boost.
po::variables_map store_strictly(const std::vector<Found>& found, unsigned mode) {
  // Only the options given are described, each once however often it was given: describing
  // all of them (about 80) took more instructions than the rest of a launch's parse.
  po::options_description desc;
  std::vector<const OptSpec*> described;
  for (const auto& f : found) {
    const OptSpec& s = *f.spec;
    if (!(s.modes & mode) || std::find(described.begin(), described.end(), &s) != described.end())
      continue;
    described.push_back(&s);
    if (!s.arg) {
      desc.add_options()(s.name, po::bool_switch());
    } else if (std::strcmp(s.name, "env") == 0) {
      desc.add_options()(s.name, po::value<std::vector<std::string>>()->composing());
    } else {
      desc.add_options()(s.name, po::value<std::string>());
    }
  }
  std::vector<std::string> tokens;
  for (const auto& f : found) {
    tokens.push_back(std::string("--") + f.spec->name + (f.value ? "=" + *f.value : ""));
  }
  po::variables_map vm;
  try {
    auto parsed =
        po::command_line_parser(tokens)
            .options(desc)
            .style(po::command_line_style::allow_long | po::command_line_style::long_allow_adjacent)
            .run();
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::multiple_occurrences& e) {
    std::string name = e.get_option_name();
    if (name.compare(0, 2, "--") == 0) name = name.substr(2);
    throw UsageError(shown(spec_named(name)) + " is given more than once; expected it once");
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "; see hvdrun --help");
  }
  return vm;
}

// The stored options, by name.
class Values {
 public:
  explicit Values(po::variables_map vm) : vm_(std::move(vm)) {}

  bool given(const char* name) const {
    auto it = vm_.find(name);
    if (it == vm_.end()) return false;
    if (const bool* b = boost::any_cast<bool>(&it->second.value())) return *b;
    return true;
  }
  std::string str(const char* name) const { return vm_[name].as<std::string>(); }
  std::string nonempty(const char* name) const {
    std::string v = str(name);
    if (v.empty()) {
      const OptSpec& s = spec_named(name);
      throw UsageError(shown(s) + " needs a non-empty value; expected " + shown(s) + " " + s.arg);
    }
    return v;
  }
  std::vector<std::string> list(const char* name) const {
    return vm_.count(name) ? vm_[name].as<std::vector<std::string>>() : std::vector<std::string>{};
  }

 private:
  po::variables_map vm_;
};

// --log-level and --verbose: they apply to every action.
void apply_logging(const Values& v, launcher::LaunchOptions& o) {
  if (v.given("log-level")) {
    std::string level = v.str("log-level");
    std::transform(level.begin(), level.end(), level.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static const std::set<std::string> kLevels = {"trace", "debug",    "info", "warning",
                                                  "error", "critical", "off"};
    if (!kLevels.count(level)) {
      throw UsageError("bad value " + quote(v.str("log-level")) +
                       " for --log-level; expected trace, debug, info, warning, error, "
                       "critical or off");
    }
    o.log_level = level;
  }
  o.verbose = v.given("verbose");
}

void check_build_alone(const std::vector<Found>& found, const std::vector<std::string>& command) {
  for (const auto& f : found) {
    std::string_view n = f.spec->name;
    if (n != "check-build" && n != "verbose" && n != "log-level") {
      throw UsageError("--check-build takes no other options; got " + shown(*f.spec));
    }
  }
  if (!command.empty()) {
    throw UsageError("--check-build takes no command; got " + quote(command.front()));
  }
}

// The options `run` and `check` share: ranks, hosts, SSH and the start deadline.
void apply_hosts_and_ssh(const Values& v, launcher::LaunchOptions& o) {
  if (v.given("num-proc") && v.str("num-proc") == "auto") {
    o.np_auto = true;
  } else if (v.given("num-proc")) {
    o.np = number_option(spec_named("num-proc"), v.str("num-proc"), 1, kMaxNp,
                         "a whole number of processes", "-np 4");
  }
  if (v.given("hosts") && v.given("hostfile")) {
    throw UsageError("-H and --hostfile cannot be used together; give the hosts one way");
  }
  if (v.given("hosts")) o.hosts = hostfile::parse_host_list(v.str("hosts"));
  if (v.given("hostfile")) o.hosts = hostfile::parse_hostfile(v.nonempty("hostfile"));
  if (v.given("ssh-port")) {
    o.ssh_port = number_option(spec_named("ssh-port"), v.str("ssh-port"), 1, 65535, "a port number",
                               "-p 2222");
  }
  if (v.given("ssh-identity-file")) o.ssh_identity_file = v.nonempty("ssh-identity-file");
  if (v.given("ssh-config")) o.ssh_config = v.nonempty("ssh-config");
  if (v.given("start-timeout")) {
    o.start_timeout_s = number_option(spec_named("start-timeout"), v.str("start-timeout"), 1,
                                      kMaxStartTimeout, "whole seconds", "--start-timeout 60");
  }
  if (v.given("remote-hvdrun")) o.remote_hvdrun = v.nonempty("remote-hvdrun");
  if (v.given("kill-grace")) {
    o.kill_grace_s = number_option(spec_named("kill-grace"), v.str("kill-grace"), 0, 3600,
                                   "whole seconds", "--kill-grace 30");
  }
}

// --bind-to, --map-by, --cpus-per-rank and --report-bindings (docs/placement.md).
void apply_placement(const Values& v, launcher::LaunchOptions& o) {
  launcher::PlacementPolicy& p = o.placement;
  if (v.given("bind-to")) {
    const auto b = launcher::parse_bind_to(v.str("bind-to"));
    if (!b) {
      throw UsageError("bad value " + quote(v.str("bind-to")) +
                       " for --bind-to; expected none, core, l3, numa or socket");
    }
    p.bind_to = *b;
    o.bind_to_given = true;
  }
  if (v.given("map-by")) {
    const auto m = launcher::parse_map_by(v.str("map-by"));
    if (!m) {
      throw UsageError("bad value " + quote(v.str("map-by")) +
                       " for --map-by; expected slot, numa or socket");
    }
    p.map_by = *m;
  }
  if (v.given("cpus-per-rank")) {
    p.cpus_per_rank = number_option(spec_named("cpus-per-rank"), v.str("cpus-per-rank"), 1, 4096,
                                    "a whole number of cores", "--cpus-per-rank 4");
  }
  if (p.bind_to == launcher::BindTo::none && (v.given("map-by") || v.given("cpus-per-rank"))) {
    throw UsageError(
        "--map-by and --cpus-per-rank apply only when binding; add --bind-to core (or l3, numa, "
        "socket)");
  }
  if (v.given("gpus-per-rank")) {
    p.gpus_per_rank = number_option(spec_named("gpus-per-rank"), v.str("gpus-per-rank"), 0, 1024,
                                    "a whole number of GPUs", "--gpus-per-rank 1");
  }
  o.report_bindings = v.given("report-bindings");
  if (v.given("include")) o.include = v.nonempty("include");
  if (v.given("exclude")) o.exclude = v.nonempty("exclude");
}

// The options of `run` alone: interface, output, and the ranks' environment.
void apply_run_options(const Values& v, const std::vector<Found>& found,
                       launcher::LaunchOptions& o) {
  if (v.given("network-interface")) {
    o.network_interface = v.nonempty("network-interface");
    if (o.network_interface.find_first_of(" \t\n/") != std::string::npos) {
      throw UsageError("bad value " + quote(o.network_interface) +
                       " for --network-interface; expected an interface name such as eth0");
    }
  }
  if (v.given("network-interfaces")) {
    o.network_interfaces = launcher::parse_interface_list(v.nonempty("network-interfaces"));
    if (!o.network_interface.empty())
      throw UsageError(
          "--network-interface and --network-interfaces were both given; give --network-interface "
          "IF for one interface everywhere (also the rendezvous address), or --network-interfaces "
          "A,B for the first of them present on each host");
  }
  if (v.given("output-filename")) o.output_filename = v.nonempty("output-filename");
  o.prefix_timestamp = v.given("prefix-output-with-timestamp");
  if (v.given("ranks-filter"))
    o.console_ranks = parse_rank_list(v.nonempty("ranks-filter"), "--ranks-filter");
  if (v.given("local-ranks-filter"))
    o.console_local_ranks =
        parse_rank_list(v.nonempty("local-ranks-filter"), "--local-ranks-filter");
  if (v.given("timeout")) {
    o.timeout_s = number_option(spec_named("timeout"), v.str("timeout"), 1, kMaxJobTimeout,
                                "whole seconds", "--timeout 3600");
  }
  if (v.given("result-file")) o.result_file = v.nonempty("result-file");
  // --config-file, the tuning flags, --env-file, then -x: a later source wins in the ranks.
  EnvSources sources;
  for (const auto& f : found) {
    if (std::strcmp(f.spec->group, "Horovod") == 0) {
      sources.knobs.emplace_back(f.spec->name, f.value.value_or(""));
    }
  }
  if (v.given("config-file")) sources.config_file = v.nonempty("config-file");
  if (v.given("env-file")) sources.env_file = v.nonempty("env-file");
  sources.items = v.list("env");
  o.env = rank_env_items(sources);
}

int whole(const Values& v, const char* name, long lo, long hi, const char* example) {
  return number_option(spec_named(name), v.str(name), lo, hi, "a whole number", example);
}

// The elastic flags (horovodrun's, and torchrun's --max-restarts) and their bounds.
void apply_elastic(const Values& v, launcher::LaunchOptions& o) {
  launcher::ElasticOptions& e = o.elastic;
  if (v.given("host-discovery-script")) e.discovery_script = v.nonempty("host-discovery-script");
  if (v.given("min-np")) e.min_np = whole(v, "min-np", 1, kMaxNp, "--min-np 2");
  if (v.given("max-np")) e.max_np = whole(v, "max-np", 1, kMaxNp, "--max-np 8");
  if (v.given("slots-per-host"))
    e.slots_per_host = whole(v, "slots-per-host", 1, kMaxNp, "--slots-per-host 4");
  if (v.given("reset-limit") && v.given("max-restarts"))
    throw UsageError("--reset-limit and --max-restarts are the same limit; give one of them");
  for (const char* name : {"reset-limit", "max-restarts"}) {
    if (!v.given(name)) continue;
    e.reset_limit_flag = std::string("--") + name;
    e.reset_limit = whole(v, name, 0, 1000000, (e.reset_limit_flag + " 3").c_str());
  }
  if (v.given("elastic-timeout"))
    e.elastic_timeout_s = whole(v, "elastic-timeout", 1, kMaxStartTimeout, "--elastic-timeout 600");
  if (v.given("blacklist-cooldown-range")) {
    std::tie(e.cooldown_min_s, e.cooldown_max_s) =
        compat::horovod_cooldown_range(v.str("blacklist-cooldown-range"));
  }
  const bool any = v.given("max-np") || v.given("slots-per-host") ||
                   v.given("blacklist-cooldown-range") || v.given("elastic-timeout");
  if (e.reset_limit && !e.enabled()) {
    // Restarts alone (torchrun's --max-restarts): the same job again, at its size or less.
    e.min_np = 1;
    if (!e.max_np) e.max_np = o.np;
  }
  if (any && !e.enabled())
    throw UsageError(
        "elastic options need elastic mode; add --min-np N or --host-discovery-script PATH");
  if (!e.enabled()) return;
  if (!o.include.empty() || !o.exclude.empty())
    throw UsageError("--include and --exclude do not apply in elastic mode; give the hosts to use");
  if (!e.discovery_script.empty() && !o.hosts.empty())
    throw UsageError(
        "--host-discovery-script and -H/--hostfile cannot be used together; the "
        "script says which hosts there are");
  if (!e.min_np) e.min_np = o.np.value_or(1);
  if (e.max_np && *e.min_np > *e.max_np)
    throw UsageError("--min-np " + std::to_string(*e.min_np) + " is above --max-np " +
                     std::to_string(*e.max_np) + "; expected min-np <= -np <= max-np");
  if (o.np && (*o.np < *e.min_np || (e.max_np && *o.np > *e.max_np)))
    throw UsageError("-np " + std::to_string(*o.np) + " is outside --min-np " +
                     std::to_string(*e.min_np) + " .. --max-np " +
                     (e.max_np ? std::to_string(*e.max_np) : std::string("(no limit)")) +
                     "; expected min-np <= -np <= max-np");
}

void check_has_no_command(const std::vector<std::string>& command) {
  if (!command.empty()) {
    throw UsageError("'hvdrun check' takes no command (got " + quote(command.front()) +
                     "); it only checks the hosts, run the job with hvdrun [options] command");
  }
}

void set_run_command(launcher::LaunchOptions& o, std::vector<std::string> command) {
  if (command.empty()) {
    throw UsageError(
        "no command to run; expected hvdrun [options] command [args...], as in "
        "hvdrun -np 4 python train.py (see hvdrun --help)");
  }
  // Without -np and -H/--hostfile the hosts may come from a scheduler's allocation: the
  // launch plan decides, and says when -np is missing.
  o.command = std::move(command);
}

}  // namespace

Command parse_command_line(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "stacks") return stacks_command(args);
  size_t first = 0;
  const unsigned mode = subcommand(args, first);
  Walk w = walk(args, first, mode);
  if (w.answer) return std::move(*w.answer);
  const Values values(store_strictly(w.found, mode));

  Command cmd;
  launcher::LaunchOptions& o = cmd.options;
  apply_logging(values, o);
  if (mode == kAgent) {
    if (!w.command.empty()) {
      throw UsageError("'hvdrun agent' takes no arguments; got " + quote(w.command.front()) +
                       " (it is started by hvdrun itself)");
    }
    cmd.action = values.given("topology") ? Action::agent_topology : Action::agent;
    return cmd;
  }
  if (values.given("check-build")) {
    check_build_alone(w.found, w.command);
    cmd.action = Action::check_build;
    return cmd;
  }
  apply_hosts_and_ssh(values, o);
  if (values.given("launcher")) o.launcher = launcher::parse_launcher(values.str("launcher"));
  if (mode == kRun) {
    apply_run_options(values, w.found, o);
    apply_placement(values, o);
    apply_elastic(values, o);
    GivenFlags join;
    for (const char* name : join_flag_names()) {
      if (values.given(name)) join[name] = spec_named(name).arg ? values.str(name) : "";
    }
    apply_join(join, o, w.command, [](const char* n) -> const char* { return std::getenv(n); });
    set_run_command(o, std::move(w.command));
    o.dry_run = values.given("dry-run");
    o.json = values.given("json");
    if (o.json && !o.dry_run) {
      throw UsageError(
          "--json needs --dry-run when running a job; add --dry-run, or use --json with hvdrun "
          "check");
    }
    cmd.action = Action::run;
  } else {
    o.json = values.given("json");
    o.topology = values.given("topology");
    check_has_no_command(w.command);
    cmd.action = Action::check;
  }
  // Catch -np larger than the slots now, before anything starts (the launch plan places);
  // hosts counted from their GPUs are counted at the launch.
  const bool counted = std::any_of(o.hosts.begin(), o.hosts.end(),
                                   [](const hostfile::HostSlots& h) { return h.auto_slots; });
  if (!o.hosts.empty() && !counted && !o.np_auto)
    hostfile::ranks_wanted(hostfile::filter_hosts(o.hosts, o.include, o.exclude), o.np);
  return cmd;
}

}  // namespace hvdrun::cli
