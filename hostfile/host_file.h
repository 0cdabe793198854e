// Reading a host source from a file (--hostfile, PBS_NODEFILE, PE_HOSTFILE) without ever
// blocking: the path comes from the user or the environment, and a FIFO there would make a
// plain open() wait for a writer for ever, --dry-run included; a device could be read
// without end. Only a regular file is read.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/error.h"

namespace hvdrun::hostfile {

/// What kind of file `mode` (st_mode) is, for a message: "a FIFO", "a directory",
/// "a character device", "a block device", "a socket", "a symbolic link", "a regular file".
std::string file_kind(unsigned mode);

/// The whole of the regular file `path`, at most `max_bytes`. Anything else is refused
/// before it is read, and without blocking: the path is stat'ed first and opened only when
/// it names a regular file (with O_NONBLOCK, so a FIFO swapped in meanwhile cannot block the
/// open), and the open file is checked again. Each refusal throws `fail(what)`, `what` being
/// "cannot open: ERROR", "a FIFO, not a regular file", "larger than N MiB" and the like;
/// the caller adds where the path came from and what to do.
std::string read_host_file(const std::string& path, std::size_t max_bytes,
                           const std::function<UsageError(const std::string& what)>& fail);

}  // namespace hvdrun::hostfile
