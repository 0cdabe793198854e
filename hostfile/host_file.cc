// read_host_file(): see host_file.h.
#include "hostfile/host_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd.h"

namespace hvdrun::hostfile {

std::string file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "not a file";
  }
}

std::string read_host_file(const std::string& path, std::size_t max_bytes,
                           const std::function<UsageError(const std::string& what)>& fail) {
  auto failed = [&](const char* call, int err) {
    return fail(call + (": " + std::string(std::strerror(err))));
  };
  auto check = [&](const struct stat& st) {
    if (!S_ISREG(st.st_mode)) throw fail(file_kind(st.st_mode) + ", not a regular file");
    if (static_cast<std::size_t>(st.st_size) > max_bytes)
      throw fail("larger than " + std::to_string(max_bytes >> 20) + " MiB");
  };
  // stat() first: opening a device can act on it (a tape rewinds, a watchdog arms).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw failed("cannot open", errno);
  check(st);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd) throw failed("cannot open", errno);
  // The path may name another file by now; this is the one that was opened.
  if (::fstat(fd.get(), &st) != 0) throw failed("cannot stat", errno);
  check(st);
  std::string data;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw failed("cannot read", errno);
    if (n == 0) break;
    data.append(buf, static_cast<std::size_t>(n));
    // It grew while being read.
    if (data.size() > max_bytes)
      throw fail("larger than " + std::to_string(max_bytes >> 20) + " MiB");
  }
  return data;
}

}  // namespace hvdrun::hostfile
