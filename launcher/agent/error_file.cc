// The ranks' error files (error_file.h): the agent's private directory for them, and a small
// JSON reader that takes from torchelastic's format only the strings it needs.
#include "launcher/agent/error_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace hvdrun::launcher {

namespace {

// Where the directory may go, in order: a memory file system the user may write to
// ($XDG_RUNTIME_DIR, else /dev/shm), since making and removing a directory and its files on
// a disk's journalled file system costs about half a millisecond of every launch; then
// $TMPDIR, else /tmp.
std::vector<std::string> error_dir_parents() {
  std::vector<std::string> out;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  for (const char* dir : {runtime, "/dev/shm"}) {
    struct stat st {};
    if (dir != nullptr && *dir == '/' && ::stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
        ::access(dir, W_OK | X_OK) == 0)
      out.emplace_back(dir);
  }
  const char* tmp = std::getenv("TMPDIR");
  out.emplace_back(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
  return out;
}

}  // namespace

ErrorDir::ErrorDir(const std::string& job_id) {
  int error = 0;
  for (const std::string& parent : error_dir_parents()) {
    std::string pattern = parent + "/hvdrun-errors-" + job_id + "-XXXXXX";
    // mkdtemp makes it 0700: other users cannot read a traceback or plant a file there.
    if (::mkdtemp(pattern.data()) != nullptr) {
      dir_ = std::move(pattern);
      return;
    }
    error = errno;  // a full /dev/shm, say: the next place
  }
  errno = error;
  throw_errno("the ranks' error file directory", "mkdtemp");
}

ErrorDir::~ErrorDir() {
  // The rank files (rank-N.json and a writer's rank-N.json.tmp); anything else a rank put
  // there stays, and rmdir then fails harmlessly.
  if (DIR* d = ::opendir(dir_.c_str())) {
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind("rank-", 0) == 0) names.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : names) ::unlink((dir_ + "/" + n).c_str());
  }
  ::rmdir(dir_.c_str());
}

std::string ErrorDir::path(int rank) const {
  return dir_ + "/rank-" + std::to_string(rank) + ".json";
}

std::string ErrorDir::fresh_path(int rank) const {
  std::string p = path(rank);
  ::unlink(p.c_str());
  return p;
}

std::string ErrorDir::stack_path(int rank) const {
  return dir_ + "/rank-" + std::to_string(rank) + ".stacks";
}

std::string ErrorDir::fresh_stack_path(int rank) const {
  std::string p = stack_path(rank);
  ::unlink(p.c_str());
  UniqueFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) throw_errno("the stack file " + p, "open");
  return p;
}

namespace {

// A JSON value as far as the error file needs it: strings and objects; arrays are parsed and
// dropped, numbers and literals skipped over without a closer check.
struct Value {
  enum Kind { other, string, object } kind = other;
  std::string text;
  std::vector<std::pair<std::string, std::unique_ptr<Value>>> members;

  const Value* member(std::string_view name) const {
    for (const auto& [k, v] : members) {
      if (k == name) return v.get();
    }
    return nullptr;
  }
};

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  // The document, or nullptr when it is not well-formed JSON.
  std::unique_ptr<Value> document() {
    auto v = value(0);
    space();
    return v && i_ == s_.size() ? std::move(v) : nullptr;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }

  std::unique_ptr<Value> value(int depth) {
    space();
    if (i_ >= s_.size() || depth > kMaxDepth) return nullptr;
    auto v = std::make_unique<Value>();
    const char c = s_[i_];
    if (c == '"') {
      v->kind = Value::string;
      return string(v->text) ? std::move(v) : nullptr;
    }
    if (c == '{' || c == '[') return container(*v, depth) ? std::move(v) : nullptr;
    // A number or a literal: its characters, not checked closer (nothing here reads them).
    const std::size_t start = i_;
    constexpr std::string_view kScalar = "+-.0123456789eEtruefalsn";
    while (i_ < s_.size() && kScalar.find(s_[i_]) != std::string_view::npos) ++i_;
    return i_ > start ? std::move(v) : nullptr;
  }

  bool container(Value& v, int depth) {
    const bool obj = s_[i_++] == '{';
    if (obj) v.kind = Value::object;
    if (eat(obj ? '}' : ']')) return true;
    do {
      std::string key;
      if (obj && !(eat('"') && (--i_, string(key)) && eat(':'))) return false;
      auto item = value(depth + 1);
      if (!item) return false;
      if (obj) v.members.emplace_back(std::move(key), std::move(item));
    } while (eat(','));
    return eat(obj ? '}' : ']');
  }

  static void utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(unsigned& cp) {
    if (i_ + 4 > s_.size()) return false;
    cp = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      cp = cp * 16 + static_cast<unsigned>(d);
    }
    return true;
  }

  // At the opening quote.
  bool string(std::string& out) {
    ++i_;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(cp)) return false;
          unsigned low = 0;
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u" && (i_ += 2, hex4(low)) &&
              low >= 0xDC00 && low < 0xE000)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          utf8(out, cp);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<std::string> error_file_traceback(std::string_view json) {
  const auto doc = Reader(json).document();
  const Value* m = doc && doc->kind == Value::object ? doc->member("message") : nullptr;
  if (m == nullptr) return std::nullopt;
  if (m->kind == Value::string) return m->text;
  if (m->kind != Value::object) return std::nullopt;
  if (const Value* info = m->member("extraInfo"); info != nullptr) {
    if (const Value* stack = info->member("py_callstack");
        stack != nullptr && stack->kind == Value::string && !stack->text.empty())
      return stack->text;
  }
  const Value* text = m->member("message");
  if (text != nullptr && text->kind == Value::string) return text->text;
  return std::nullopt;
}

std::string read_error_file(const std::string& path, std::size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  // A file far larger than any traceback is not read whole.
  std::string json;
  json.resize(16u << 20);
  f.read(json.data(), static_cast<std::streamsize>(json.size()));
  json.resize(static_cast<std::size_t>(f.gcount()));
  std::string tb = error_file_traceback(json).value_or("");
  while (!tb.empty() && tb.back() == '\n') tb.pop_back();
  if (tb.size() > max_bytes) tb = "...\n" + tb.substr(tb.size() - max_bytes);
  return tb;
}

}  // namespace hvdrun::launcher
