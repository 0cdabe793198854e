// The rules of common/safe_path.h. Directories are walked one component at a time from
// "/" with openat, each checked on its own descriptor; symbolic links are resolved here
// (when their owner is trusted) rather than by the kernel, so every directory actually
// passed through is checked, not only the one at the end.
#include "common/safe_path.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

namespace hvdrun {
namespace {

// Linux's own limit on links followed in one lookup.
constexpr int kMaxLinks = 40;

[[noreturn]] void refuse_errno(const std::string& path, const char* doing, int err) {
  throw UnsafePath(path, std::string("cannot be ") + doing + " (" + std::strerror(err) + ")");
}

void check_dir(const std::string& path, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) throw UnsafePath(path, "is not a directory");
  if (!trusted_owner(st.st_uid))
    throw UnsafePath(path, "belongs to another user, " + user_text(st.st_uid) +
                               ", who could replace what is written there");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    throw UnsafePath(path, std::string("is writable by ") +
                               ((st.st_mode & S_IWOTH) != 0 ? "every user" : "its group") +
                               " and has no sticky bit, so another user could replace what is "
                               "written there");
}

// `name` inside `parent` could not be opened (O_NOFOLLOW): says why, by what is there.
[[noreturn]] void refuse_entry(int parent, const std::string& path, const std::string& name,
                               int err) {
  struct stat lst {};
  if (::fstatat(parent, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
    throw UnsafePath(path, "is a symbolic link (owned by " + user_text(lst.st_uid) +
                               ") and is not followed; remove it");
  if (err == EACCES && ::fstatat(parent, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 &&
      !trusted_owner(lst.st_uid))
    throw UnsafePath(path, "belongs to another user, " + user_text(lst.st_uid) + "; remove it");
  if (err == ENXIO || err == EWOULDBLOCK)
    throw UnsafePath(path, "is not a regular file (a FIFO or socket); remove it");
  if (err == EISDIR) throw UnsafePath(path, "is a directory, not a file; remove it");
  if (err == ENOTDIR) throw UnsafePath(path, "is not a directory; remove it");
  refuse_errno(path, "opened", err);
}

// The components of `path` in order ("a/./b" -> a, ., b; empty ones dropped).
std::deque<std::string> components(const std::string& path) {
  std::deque<std::string> out;
  std::size_t at = 0;
  while (at <= path.size()) {
    const std::size_t slash = path.find('/', at);
    const std::size_t end = slash == std::string::npos ? path.size() : slash;
    if (end > at) out.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  std::vector<char> cwd(PATH_MAX);
  if (::getcwd(cwd.data(), cwd.size()) == nullptr)
    refuse_errno(path, "resolved from the working directory", errno);
  return std::string(cwd.data()) + "/" + path;
}

// The directories walked so far, from "/", with the path they stand for.
struct Walk {
  std::vector<UniqueFd> fds;
  std::vector<std::string> names;

  std::string here(const std::string& name) const {
    std::string p;
    for (const auto& n : names) p += "/" + n;
    return p + "/" + name;
  }
  void to_root() {
    fds.resize(1);
    names.clear();
  }
};

// Follows the link `name` in the walk's last directory: its target's components go in
// front of what is left to walk.
void follow(Walk& w, const std::string& name, const struct stat& lst, std::deque<std::string>& todo,
            int& links) {
  const std::string here = w.here(name);
  if (!trusted_owner(lst.st_uid))
    throw UnsafePath(here, "is a symbolic link that belongs to another user, " +
                               user_text(lst.st_uid) + ", and is not followed");
  if (++links > kMaxLinks) throw UnsafePath(here, "has too many levels of symbolic links");
  std::vector<char> buf(PATH_MAX + 1);
  const ssize_t n = ::readlinkat(w.fds.back().get(), name.c_str(), buf.data(), buf.size() - 1);
  if (n < 0) refuse_errno(here, "read as a symbolic link", errno);
  const std::string target(buf.data(), static_cast<std::size_t>(n));
  if (!target.empty() && target[0] == '/') w.to_root();
  auto parts = components(target);
  todo.insert(todo.begin(), parts.begin(), parts.end());
}

}  // namespace

UnsafePath::UnsafePath(std::string path, std::string why)
    : std::runtime_error("'" + path + "' " + why), path_(std::move(path)), why_(std::move(why)) {}

bool trusted_owner(uid_t uid) noexcept { return uid == ::geteuid() || uid == 0; }

std::string user_text(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr)
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  return "uid " + std::to_string(uid);
}

UniqueFd open_trusted_dir(const std::string& path, bool create) {
  if (path.empty()) throw UnsafePath(path, "is empty");
  Walk w;
  w.fds.emplace_back(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (!w.fds.back() || ::fstat(w.fds.back().get(), &st) != 0) refuse_errno("/", "opened", errno);
  check_dir("/", st);
  auto todo = components(absolute(path));
  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (w.fds.size() > 1) {
        w.fds.pop_back();
        w.names.pop_back();
      }
      continue;
    }
    const int parent = w.fds.back().get();
    const std::string here = w.here(name);
    struct stat lst {};
    if (::fstatat(parent, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT || !create) refuse_errno(here, "examined", errno);
      if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST)
        refuse_errno(here, "created", errno);
      if (::fstatat(parent, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) != 0)
        refuse_errno(here, "examined", errno);
    }
    if (S_ISLNK(lst.st_mode)) {
      follow(w, name, lst, todo, links);
      continue;
    }
    UniqueFd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd && errno == ENOTDIR) throw UnsafePath(here, "is not a directory");
    if (!fd) refuse_entry(parent, here, name, errno);
    if (::fstat(fd.get(), &st) != 0) refuse_errno(here, "examined", errno);
    check_dir(here, st);
    w.fds.push_back(std::move(fd));
    w.names.push_back(name);
  }
  return std::move(w.fds.back());
}

UniqueFd open_private_dir(int dir, const std::string& path, const std::string& name) {
  if (::mkdirat(dir, name.c_str(), 0700) != 0 && errno != EEXIST)
    refuse_errno(path, "created", errno);
  UniqueFd fd(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) refuse_entry(dir, path, name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) refuse_errno(path, "examined", errno);
  check_dir(path, st);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    throw UnsafePath(path, "is writable by other users; remove it (hvdrun makes it 0700)");
  return fd;
}

// Opened without O_TRUNC and non-blocking (a FIFO would otherwise block here); truncated
// only once it is known to be a regular file of this user.
UniqueFd open_private_file(int dir, const std::string& path, const std::string& name,
                           bool truncate) {
  UniqueFd fd(::openat(dir, name.c_str(),
                       O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0600));
  if (!fd) refuse_entry(dir, path, name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) refuse_errno(path, "examined", errno);
  if (!S_ISREG(st.st_mode)) throw UnsafePath(path, "is not a regular file; remove it");
  if (!trusted_owner(st.st_uid))
    throw UnsafePath(path, "belongs to another user, " + user_text(st.st_uid) + "; remove it");
  if (truncate && ::ftruncate(fd.get(), 0) != 0) refuse_errno(path, "truncated", errno);
  set_nonblocking(fd.get(), false);
  return fd;
}

}  // namespace hvdrun
