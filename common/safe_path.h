// Files and directories hvdrun writes where another local user might also write (/tmp, a
// team's scratch area): the one set of rules every such path follows (--output-filename's
// files, the timeline), so that a link, FIFO, file or directory another user prepared is
// refused with a reason, never followed, waited on, truncated or written into.
//
// The rules: every directory on the way is owned by this user or root, and one that group
// or others may write has the sticky bit (as /tmp has: there nobody can rename what another
// user made); a symbolic link on the way is followed only when this user or root owns it;
// what hvdrun creates is 0700 (directories) or 0600 (files); a file is opened without
// following a link and without blocking, and used only once fstat has shown a regular file
// of this user (or root). Everything is checked on the descriptor actually opened, so no
// check can be raced by a rename between it and the use. python/hvdrun/_safe_path.py
// applies the same rules to what the Python package writes.
#pragma once

#include <stdexcept>
#include <string>

#include <sys/types.h>

#include "common/fd.h"

namespace hvdrun {

/// A path refused by these rules: `path()` names the offending component, `why()` says
/// what is wrong with it ("belongs to another user, nobody (uid 65534), ..."). Callers
/// add their own context and advice.
class UnsafePath : public std::runtime_error {
 public:
  UnsafePath(std::string path, std::string why);
  /// The component refused.
  const std::string& path() const noexcept { return path_; }
  /// What is wrong with it.
  const std::string& why() const noexcept { return why_; }

 private:
  std::string path_;
  std::string why_;
};

/// True when files owned by `uid` are this process's own: its effective user, or root.
bool trusted_owner(uid_t uid) noexcept;

/// "nobody (uid 65534)", or "uid 65534" when the user has no name.
std::string user_text(uid_t uid);

/// Opens the directory `path` (relative paths from the working directory), each component
/// checked as above; with `create`, missing components are made with mode 0700. Throws
/// UnsafePath.
UniqueFd open_trusted_dir(const std::string& path, bool create);

/// Opens the directory `name` inside `dir`, made 0700 when missing, never through a link;
/// it must be owned by this user (or root) and writable by nobody else. `path` names it in
/// messages. Throws UnsafePath.
UniqueFd open_private_dir(int dir, const std::string& path, const std::string& name);

/// Opens the file `name` inside `dir` for writing, made 0600 when missing, never through a
/// link and never waiting on a FIFO; it must be a regular file of this user (or root).
/// Emptied once checked when `truncate`. Returned in blocking mode. `path` names it in
/// messages. Throws UnsafePath.
UniqueFd open_private_file(int dir, const std::string& path, const std::string& name,
                           bool truncate);

}  // namespace hvdrun
