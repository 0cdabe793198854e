// Safe opening of --output-filename's files: every directory written into is checked on
// the descriptor actually opened (fstat), and everything below DIR is reached relative to
// that descriptor with O_NOFOLLOW, so a link planted by another user is refused, never
// followed.
#include "launcher/output_files.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace hvdrun::launcher {
namespace {

constexpr const char* kWhatToDo =
    "; give --output-filename a directory of your own (hvdrun creates a missing one with "
    "mode 0700)";

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw UsageError("--output-filename: '" + path + "' " + why + kWhatToDo);
}

std::string user_text(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr)
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  return "uid " + std::to_string(uid);
}

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

void check_dir(const std::string& path, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) refuse(path, "is not a directory");
  if (!trusted_owner(st.st_uid))
    refuse(path, "belongs to another user, " + user_text(st.st_uid) +
                     ", who could replace the files written there");
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0)
    refuse(path,
           "is writable by every user and has no sticky bit, so any user could plant "
           "links in it");
}

[[noreturn]] void refuse_errno(const std::string& path, const char* doing, int err) {
  refuse(path, std::string("cannot be ") + doing + " (" + std::strerror(err) + ")");
}

// Creates the missing components of `path` (0700) and opens it. A component that is a
// symbolic link is followed only when this user or root owns the link.
UniqueFd open_top(const std::string& path) {
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string cur = path.substr(0, pos);
    if (cur.empty()) continue;
    struct stat lst {};
    if (::lstat(cur.c_str(), &lst) == 0) {
      if (S_ISLNK(lst.st_mode) && !trusted_owner(lst.st_uid))
        refuse(cur, "is a symbolic link that belongs to another user, " + user_text(lst.st_uid) +
                        ", and is not followed");
      continue;
    }
    if (errno != ENOENT) refuse_errno(cur, "examined", errno);
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) refuse_errno(cur, "created", errno);
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) refuse_errno(path, "opened as a directory", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) refuse_errno(path, "examined", errno);
  check_dir(path, st);
  return fd;
}

// `name` inside the directory `parent`: a symbolic link there is refused by name.
[[noreturn]] void refuse_entry(int parent, const std::string& path, const std::string& name,
                               int err) {
  struct stat lst {};
  if (::fstatat(parent, name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
    refuse(path, "is a symbolic link (owned by " + user_text(lst.st_uid) +
                     ") and is not followed; remove it");
  if (err == ENXIO || err == EWOULDBLOCK) refuse(path, "is not a regular file; remove it");
  refuse_errno(path, "opened", err);
}

UniqueFd open_rank_dir(int top, const std::string& path, const std::string& name) {
  if (::mkdirat(top, name.c_str(), 0700) != 0 && errno != EEXIST)
    refuse_errno(path, "created", errno);
  UniqueFd fd(::openat(top, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) refuse_entry(top, path, name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) refuse_errno(path, "examined", errno);
  check_dir(path, st);
  return fd;
}

// Opened without O_TRUNC and non-blocking (a FIFO would otherwise block here); truncated
// only once it is known to be a regular file of this user.
UniqueFd open_file(int dir, const std::string& path, const std::string& name) {
  UniqueFd fd(::openat(dir, name.c_str(),
                       O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0600));
  if (!fd) refuse_entry(dir, path, name, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) refuse_errno(path, "examined", errno);
  if (!S_ISREG(st.st_mode)) refuse(path, "is not a regular file; remove it");
  if (!trusted_owner(st.st_uid))
    refuse(path, "belongs to another user, " + user_text(st.st_uid) + "; remove it");
  if (::ftruncate(fd.get(), 0) != 0) refuse_errno(path, "truncated", errno);
  set_nonblocking(fd.get(), false);
  return fd;
}

}  // namespace

std::vector<UniqueFd> open_output_files(const std::string& dir, int size,
                                        std::string (*rank_dir)(int rank, int size), int first,
                                        int name_size) {
  std::vector<UniqueFd> files;
  UniqueFd top = open_top(dir);
  for (int r = first; r < size; ++r) {
    const std::string name = rank_dir(r, name_size > 0 ? name_size : size);
    const std::string path = dir + "/" + name;
    UniqueFd rd = open_rank_dir(top.get(), path, name);
    files.push_back(open_file(rd.get(), path + "/stdout", "stdout"));
    files.push_back(open_file(rd.get(), path + "/stderr", "stderr"));
  }
  return files;
}

}  // namespace hvdrun::launcher
