// The timeline writer (runtime/core/timeline.h): the files it writes are parsed back (a small
// strict JSON reader here, and python3's json module on one of them) and their events
// checked: rows per collective, nested phases, rank-ready and marker events, arguments,
// escaping; many threads at once; start/stop/start; a file that parses while the writer
// runs and after the process dies without stop(); errors. Runs under ASan and TSan in CI.
#include "runtime/core/timeline.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/safe_path.h"
#include "tests/skip.h"
#include "tests/support/processes.h"

using hvdrun::runtime::json_escape;
using hvdrun::runtime::Timeline;
using hvdrun::runtime::TimelineScope;
using hvdrun::testing::CapturedProcess;
using hvdrun::testing::read_file;
using hvdrun::testing::TempDir;

namespace {

// A JSON value, as much of one as the checks need.
struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::string> keys;  // an object's keys, and its values in `array`

  // The member `key` of an object; nullptr when absent.
  const Json* get(std::string_view key) const {
    if (type != Type::kObject) return nullptr;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (keys[k] == key) return &array[k];
    }
    return nullptr;
  }
  std::string str(std::string_view key) const {
    const Json* v = get(key);
    return v != nullptr && v->type == Type::kString ? v->string : "";
  }
  std::int64_t num(std::string_view key) const {
    const Json* v = get(key);
    return v != nullptr && v->type == Type::kNumber ? static_cast<std::int64_t>(v->number) : -1;
  }
};

// A strict RFC 8259 reader: throws std::runtime_error with the offset on anything else.
class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  Json document() {
    Json v = value();
    space();
    if (i_ != s_.size()) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  char peek() {
    space();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Json value() {
    const char c = peek();
    Json v;
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') {
      v.type = Json::Type::kString;
      v.string = string();
    } else if (literal("true") || literal("false")) {
      v.type = Json::Type::kBool;
      v.boolean = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
    } else if (literal("null")) {
      v.type = Json::Type::kNull;
    } else {
      v.type = Json::Type::kNumber;
      v.number = number();
    }
    return v;
  }

  Json object() {
    Json v;
    v.type = Json::Type::kObject;
    expect('{');
    if (peek() == '}') {
      ++i_;
      return v;
    }
    for (;;) {
      if (peek() != '"') fail("expected a key");
      std::string key = string();
      expect(':');
      v.keys.push_back(std::move(key));
      v.array.push_back(value());
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect('}');
      return v;
    }
  }

  Json array() {
    Json v;
    v.type = Json::Type::kArray;
    expect('[');
    if (peek() == ']') {
      ++i_;
      return v;
    }
    for (;;) {
      v.array.push_back(value());
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      return v;
    }
  }

  double number() {
    const std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("expected a value");
    while (i_ < s_.size() && std::string_view("0123456789.eE+-").find(s_[i_]) != std::string::npos)
      ++i_;
    double out = 0;
    const auto [end, ec] = std::from_chars(s_.data() + start, s_.data() + i_, out);
    if (ec != std::errc() || end != s_.data() + i_) fail("bad number");
    return out;
  }

  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return out;
      if (c < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      const std::string_view simple = "\"\\/bfnrt";
      const std::string_view meaning = "\"\\/\b\f\n\r\t";
      if (const auto k = simple.find(e); k != std::string::npos) {
        out += meaning[k];
      } else if (e == 'u') {
        unsigned cp = 0;
        if (i_ + 4 > s_.size()) fail("short \\u escape");
        const auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, cp, 16);
        if (ec != std::errc() || end != s_.data() + i_ + 4) fail("bad \\u escape");
        i_ += 4;
        utf8(out, cp);
      } else {
        fail("bad escape");
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

Json parse_file(const std::string& path) {
  const std::string text = read_file(path);
  INFO("file " << path << ":\n" << text.substr(0, 4000));
  Json doc;
  REQUIRE_NOTHROW(doc = JsonReader(text).document());
  REQUIRE(doc.type == Json::Type::kArray);
  return doc;
}

// The events of a parsed timeline (which it keeps), by kind.
struct Trace {
  Json doc;
  std::map<std::string, int> pid_of;             // row name -> pid, from process_name metadata
  std::map<int, std::vector<const Json*>> rows;  // pid -> its B/E/X events in file order
  std::vector<const Json*> markers;
  const Json* start_meta = nullptr;

  Trace(const Trace&) = delete;  // the events point into doc
  Trace& operator=(const Trace&) = delete;
  explicit Trace(Json parsed) : doc(std::move(parsed)) {
    for (const Json& e : doc.array) {
      REQUIRE(e.type == Json::Type::kObject);
      const std::string ph = e.str("ph");
      if (ph == "M") {
        const Json* args = e.get("args");
        REQUIRE(args != nullptr);
        if (e.str("name") == "process_name" && e.num("pid") == 0) start_meta = args;
        if (e.str("name") == "process_name" && e.num("pid") > 0) {
          REQUIRE(pid_of.count(args->str("name")) == 0);
          pid_of[args->str("name")] = static_cast<int>(e.num("pid"));
        }
        if (e.str("name") == "process_sort_index") {
          CHECK(args->num("sort_index") == e.num("pid"));
        }
      } else if (ph == "i") {
        markers.push_back(&e);
      } else {
        REQUIRE((ph == "B" || ph == "E" || ph == "X"));
        REQUIRE(e.num("ts") >= 0);
        rows[static_cast<int>(e.num("pid"))].push_back(&e);
      }
    }
  }

  // The row of `name` as "B:PHASE", "E", "X:rank" strings.
  std::vector<std::string> phases(const std::string& name) const {
    std::vector<std::string> out;
    auto it = pid_of.find(name);
    if (it == pid_of.end()) return out;
    auto row = rows.find(it->second);
    if (row == rows.end()) return out;
    for (const Json* e : row->second) {
      const std::string ph = e->str("ph");
      out.push_back(ph == "E" ? ph : ph + ":" + e->str("name"));
    }
    return out;
  }
};

std::vector<std::string> strings(std::initializer_list<const char*> list) {
  return {list.begin(), list.end()};
}

}  // namespace

TEST_CASE("timeline: a stopped timeline records nothing and writes no file") {
  TempDir dir("timeline");
  Timeline t;
  CHECK_FALSE(t.enabled());
  t.begin("grad", "ALLREDUCE");
  t.end_all("grad");
  t.mark("CYCLE_START");
  t.flush();
  CHECK(t.path().empty());
  t.stop();  // idempotent without a start
  CHECK(::access((dir.path() + "/never.json").c_str(), F_OK) != 0);
}

TEST_CASE("timeline: one collective's phases, rank readiness, markers and arguments") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/timeline.json";
  Timeline t;
  t.start(path, /*mark_cycles=*/true);
  CHECK(t.enabled());
  CHECK(t.path() == path);
  t.cycle();
  t.negotiate_begin("grad.fc1", "ALLREDUCE");
  t.rank_ready("grad.fc1", 1);
  t.rank_ready("grad.fc1", 0);
  t.negotiate_end("grad.fc1");
  t.begin("grad.fc1", "ALLREDUCE");
  t.begin("grad.fc1", "QUEUE");
  t.end("grad.fc1");
  t.begin("grad.fc1", "GLOO_ALLREDUCE");
  t.begin("other", "BROADCAST");
  t.end_all("grad.fc1", "float32", "[10, 3]");
  t.end("grad.fc1");  // nothing open: no event
  t.end("never.begun");
  t.end_all("other");
  t.mark("SOMETHING");
  t.stop();
  CHECK_FALSE(t.enabled());
  CHECK(t.path().empty());

  const Trace trace(parse_file(path));
  REQUIRE(trace.start_meta != nullptr);
  CHECK(trace.start_meta->num("start_time_since_epoch_in_micros") > 1600000000000000);
  CHECK(trace.pid_of.size() == 2);
  CHECK(trace.pid_of.at("grad.fc1") == 1);
  CHECK(trace.pid_of.at("other") == 2);
  CHECK(trace.pid_of.count("never.begun") == 0);
  CHECK(trace.phases("grad.fc1") ==
        strings({"B:NEGOTIATE_ALLREDUCE", "X:1", "X:0", "E", "B:ALLREDUCE", "B:QUEUE", "E",
                 "B:GLOO_ALLREDUCE", "E", "E"}));
  CHECK(trace.phases("other") == strings({"B:BROADCAST", "E"}));

  // Timestamps never go back; the operation's last E carries dtype and shape; an X has
  // a duration.
  const auto& row = trace.rows.at(1);
  for (std::size_t k = 1; k < row.size(); ++k) CHECK(row[k - 1]->num("ts") <= row[k]->num("ts"));
  const Json* args = row.back()->get("args");
  REQUIRE(args != nullptr);
  CHECK(args->str("dtype") == "float32");
  CHECK(args->str("shape") == "[10, 3]");
  CHECK(row[8]->get("args") == nullptr);  // the inner E of end_all has none
  CHECK(row[1]->num("dur") == 0);
  REQUIRE(trace.markers.size() == 2);
  CHECK(trace.markers[0]->str("name") == "CYCLE_START");
  CHECK(trace.markers[0]->str("s") == "g");
  CHECK(trace.markers[1]->str("name") == "SOMETHING");
}

TEST_CASE("timeline: cycle() writes nothing unless start() asked for cycle markers") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/t.json";
  Timeline t;
  t.start(path);
  CHECK_FALSE(t.marks_cycles());
  t.cycle();
  t.mark("EXPLICIT");
  t.stop();
  const Trace trace(parse_file(path));
  REQUIRE(trace.markers.size() == 1);
  CHECK(trace.markers[0]->str("name") == "EXPLICIT");
}

TEST_CASE("timeline: names with quotes, backslashes, control bytes and non-UTF-8 survive") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/t.json";
  const std::string odd = "a \"quoted\" \\ name\nwith\ttabs \x01 and \xc3\xa9t\xc3\xa9";
  const std::string broken = std::string("bytes \xff\xfe end");
  Timeline t;
  t.start(path);
  t.begin(odd, "ALLGATHER");
  t.end_all(odd, "in\"t", "[\\]");
  t.begin(broken, "ALLREDUCE");
  t.end(broken);
  t.stop();
  const Trace trace(parse_file(path));
  CHECK(trace.phases(odd) == strings({"B:ALLGATHER", "E"}));
  CHECK(trace.pid_of.count("bytes \xc3\xbf\xc3\xbe end") == 1);  // each byte as U+00XX
  const auto& row = trace.rows.at(trace.pid_of.at(odd));
  CHECK(row.back()->get("args")->str("dtype") == "in\"t");
  CHECK(row.back()->get("args")->str("shape") == "[\\]");
  CHECK(json_escape("plain") == "plain");
  CHECK(json_escape("\x7f") == "\\u007f");
}

TEST_CASE("timeline: the file parses while the writer runs, for python3's json too") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/live.json";
  Timeline t;
  t.start(path);
  CHECK(parse_file(path).array.size() == 2);  // the header alone is a valid file
  for (int k = 0; k < 50; ++k) {
    const std::string name = "t" + std::to_string(k % 5);
    t.begin(name, "ALLREDUCE");
    t.end(name);
    if (k % 10 == 9) {
      t.flush();
      const Trace trace(parse_file(path));
      CHECK(trace.pid_of.size() == 5);
    }
  }
  t.flush();
  CapturedProcess py({"python3", "-c",
                      "import json, sys\n"
                      "events = json.load(open(sys.argv[1]))\n"
                      "print(sum(1 for e in events if e['ph'] in 'BE'))",
                      path});
  CHECK(py.wait() == 0);
  INFO(py.err);
  CHECK(py.out == "100\n");
  t.stop();
}

TEST_CASE("timeline: a process that dies without stop() leaves a file that parses") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/died.json";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // No destructor, no stop(): the process ends the hard way after a flush.
    auto* t = new Timeline;  // NOLINT(cppcoreguidelines-owning-memory): never freed
    t->start(path);
    for (int k = 0; k < 1000; ++k) {
      t->begin("x" + std::to_string(k % 7), "ALLREDUCE");
      t->end_all("x" + std::to_string(k % 7), "float32", "[1]");
    }
    t->flush();
    t->begin("open.at.death", "ALLREDUCE");  // may or may not reach the file
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  const Trace trace(parse_file(path));
  int ends = 0;
  for (const auto& [pid, events] : trace.rows) {
    for (const Json* e : events) ends += e->str("ph") == "E" ? 1 : 0;
  }
  CHECK(ends == 1000);
}

TEST_CASE("timeline: many threads at once, each row balanced and complete") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/threads.json";
  constexpr int kThreads = 8;
  constexpr int kPerThread = 500;
  Timeline t;
  t.start(path, true);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&t, k] {
      const std::string name = "thread" + std::to_string(k);
      for (int i = 0; i < kPerThread; ++i) {
        t.negotiate_begin(name, "ALLREDUCE");
        t.rank_ready(name, k);
        t.negotiate_end(name);
        t.begin(name, "ALLREDUCE");
        t.begin(name, "MEMCPY_IN_FUSION_BUFFER");
        t.end(name);
        t.end_all(name, "float64", "[4]");
        t.cycle();
      }
    });
  }
  for (auto& th : threads) th.join();
  t.stop();
  CHECK(t.dropped() == 0);
  const Trace trace(parse_file(path));
  CHECK(trace.markers.size() == kThreads * kPerThread);
  REQUIRE(trace.pid_of.size() == kThreads);
  for (int k = 0; k < kThreads; ++k) {
    const auto phases = trace.phases("thread" + std::to_string(k));
    REQUIRE(phases.size() == 7u * kPerThread);
    int depth = 0;
    int collectives = 0;
    for (const std::string& p : phases) {
      if (p[0] == 'B') ++depth;
      if (p[0] == 'E') --depth;
      REQUIRE(depth >= 0);
      if (p == "X:" + std::to_string(k)) ++collectives;
    }
    CHECK(depth == 0);
    CHECK(collectives == kPerThread);
  }
}

TEST_CASE("timeline: start() again finishes the first file and begins a fresh one") {
  TempDir dir("timeline");
  const std::string first = dir.path() + "/first.json";
  const std::string second = dir.path() + "/second.json";
  Timeline t;
  t.start(first);
  t.begin("a", "ALLREDUCE");
  t.end("a");
  t.begin("open", "ALLGATHER");  // still open when the file changes
  t.start(second);
  t.begin("b", "BROADCAST");
  t.end("b");
  t.end("open");  // begun in the first file: nothing to close here
  t.stop();
  t.begin("after", "ALLREDUCE");  // stopped: ignored
  t.stop();
  const Trace one(parse_file(first));
  CHECK(one.phases("a") == strings({"B:ALLREDUCE", "E"}));
  CHECK(one.phases("open") == strings({"B:ALLGATHER"}));
  CHECK(one.pid_of.count("b") == 0);
  const Trace two(parse_file(second));
  CHECK(two.pid_of.size() == 1);
  CHECK(two.pid_of.at("b") == 1);  // rows are numbered afresh
  CHECK(two.phases("b") == strings({"B:BROADCAST", "E"}));
}

TEST_CASE("timeline: a scope ends its phase on every path out") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/scope.json";
  Timeline t;
  {
    TimelineScope before(t, "grad", "NOT_WRITTEN");  // stopped: nothing, now or at the end
    t.start(path);
  }
  t.begin("grad", "ALLREDUCE");
  try {
    TimelineScope outer(t, "grad", "MEMCPY_IN_FUSION_BUFFER");
    { const TimelineScope inner(t, std::string("grad"), "GLOO_ALLREDUCE"); }
    throw std::runtime_error("a failing data movement");
  } catch (const std::runtime_error&) {
  }
  t.end_all("grad");
  t.stop();
  CHECK(Trace(parse_file(path)).phases("grad") ==
        strings({"B:ALLREDUCE", "B:MEMCPY_IN_FUSION_BUFFER", "B:GLOO_ALLREDUCE", "E", "E", "E"}));
}

TEST_CASE("timeline: past its row limit it forgets finished rows, never open ones") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/rows.json";
  Timeline t(/*max_rows=*/8);
  t.start(path);
  t.begin("kept.open", "ALLREDUCE");
  for (int k = 0; k < 20; ++k) {
    const std::string name = "once" + std::to_string(k);
    t.begin(name, "ALLREDUCE");
    t.end(name);
  }
  t.begin("once0", "ALLREDUCE");  // forgotten by now: a second row of that name
  t.end("once0");
  t.end("kept.open");  // still its first row
  t.stop();
  const std::string text = read_file(path);
  CHECK(hvdrun::testing::count(text, "\"name\": \"once0\"") == 2);
  CHECK(hvdrun::testing::count(text, "\"name\": \"kept.open\"") == 1);
  JsonReader reader(text);
  const Json doc = reader.document();
  // kept.open is row 1: its E is the last event on pid 1.
  const Json* last = nullptr;
  for (const Json& e : doc.array) {
    if (e.num("pid") == 1 && e.str("ph") != "M") last = &e;
  }
  REQUIRE(last != nullptr);
  CHECK(last->str("ph") == "E");
}

TEST_CASE("timeline: events beyond the queue's bound are dropped, counted and noted") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/dropped.json";
  constexpr int kEvents = 20000;
  Timeline t(Timeline::kMaxRows, /*max_queued=*/2);
  t.start(path);
  for (int k = 0; k < kEvents; ++k) t.mark("M");
  t.stop();
  const std::uint64_t dropped = t.dropped();
  const Trace trace(parse_file(path));
  // Every event is either in the file or counted; the file's notes add up to the count.
  std::uint64_t written = 0;
  std::uint64_t noted = 0;
  for (const Json* m : trace.markers) {
    if (m->str("name") == "M") ++written;
    if (m->str("name") == "TIMELINE_EVENTS_DROPPED") {
      noted += static_cast<std::uint64_t>(m->get("args")->num("dropped"));
    }
  }
  CHECK(written + dropped == kEvents);
  CHECK(noted == dropped);
  INFO(dropped << " of " << kEvents << " events dropped with a queue of 2");
}

TEST_CASE("timeline: a file that cannot be created is an error naming it, and nothing records") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/no/such/dir/t.json";
  Timeline t;
  try {
    t.start(path);
    FAIL("start() accepted " << path);
  } catch (const hvdrun::UnsafePath& e) {
    CHECK(e.path() == dir.path() + "/no");
    CHECK_THAT(e.why(), Catch::Contains("cannot be examined (No such file or directory)"));
  }
  CHECK_FALSE(t.enabled());
  t.begin("x", "ALLREDUCE");
  t.flush();
  t.stop();
  // A good file afterwards works.
  const std::string good = dir.path() + "/t.json";
  t.start(good);
  t.begin("x", "ALLREDUCE");
  t.stop();
  CHECK(Trace(parse_file(good)).phases("x") == strings({"B:ALLREDUCE"}));
}

TEST_CASE("timeline: a link, FIFO, directory or another user's file is refused, none touched") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/t.json";
  const std::string precious = dir.path() + "/precious";
  { std::ofstream(precious) << "keep\n"; }
  std::string why;
  SECTION("a symbolic link to a file of the user's") {
    REQUIRE(::symlink(precious.c_str(), path.c_str()) == 0);
    why = "is a symbolic link";
  }
  SECTION("a FIFO nobody reads (opening must not wait)") {
    REQUIRE(::mkfifo(path.c_str(), 0666) == 0);
    why = "is not a regular file";
  }
  SECTION("a directory") {
    REQUIRE(::mkdir(path.c_str(), 0700) == 0);
    why = "is a directory, not a file";
  }
  SECTION("a file another user made writable by everyone") {
    if (::geteuid() != 0) HVDRUN_SKIP("needs root to give a file to another user");
    { std::ofstream(path) << "theirs\n"; }
    REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
    REQUIRE(::chmod(path.c_str(), 0666) == 0);
    why = "belongs to another user, nobody";
  }
  Timeline t;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    t.start(path);
    FAIL("start() accepted " << path);
  } catch (const hvdrun::UnsafePath& e) {
    CHECK(e.path() == path);
    CHECK_THAT(e.why(), Catch::Contains(why));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_FALSE(t.enabled());
  CHECK(read_file(precious) == "keep\n");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) CHECK(read_file(path) == "theirs\n");
}

TEST_CASE("timeline: a new file is the user's alone") {
  TempDir dir("timeline");
  const std::string path = dir.path() + "/t.json";
  const mode_t old = ::umask(0);
  Timeline t;
  t.start(path);
  ::umask(old);
  t.stop();
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
}

TEST_CASE("timeline: a write failure stops the timeline with the reason, callers unharmed") {
  // /dev/full would take the open and fail every write; as a device it is refused first.
  if (::access("/dev/full", W_OK) == 0) {
    Timeline t;
    REQUIRE_THROWS_AS(t.start("/dev/full"), hvdrun::UnsafePath);
    CHECK_FALSE(t.enabled());
  }
  // A file size limit lets the header through and fails the writer later (EFBIG), in a
  // child process so the limit stays there. The child reports through its exit code.
  TempDir dir("timeline");
  const std::string path = dir.path() + "/limited.json";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    Timeline t;
    t.start(path);
    for (int k = 0; k < 2000; ++k) {
      t.begin("grad" + std::to_string(k), "ALLREDUCE");
      t.end("grad" + std::to_string(k));
    }
    t.flush();
    if (t.enabled()) ::_exit(11);
    if (t.error().find("pwrite") == std::string::npos) ::_exit(12);
    if (t.error().find(path) == std::string::npos) ::_exit(13);
    t.begin("after", "ALLREDUCE");  // ignored, no error
    t.stop();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // What was written before the failure is still one valid array.
  const Trace trace(parse_file(path));
  CHECK(trace.start_meta != nullptr);
}
