// Out-of-line pieces of the shared error types.
#include "common/error.h"

#include <cerrno>
#include <cstring>

namespace hvdrun {

SystemError::SystemError(const std::string& context, const char* syscall, int err)
    : std::runtime_error(context + ": " + syscall + ": " + std::strerror(err)), code_(err) {}

void throw_errno(const std::string& context, const char* syscall) {
  throw SystemError(context, syscall, errno);
}

}  // namespace hvdrun
