// libssh2's error codes in words. A bare "libssh2 -43" tells a user nothing; "the
// connection was lost while receiving (LIBSSH2_ERROR_SOCKET_RECV)" tells what happened
// and which code to search for.
#pragma once

#include <string>
#include <string_view>

namespace hvdrun::ssh {

/// The name of a libssh2 error code ("LIBSSH2_ERROR_SOCKET_RECV" for -43), or empty for a
/// code this libssh2 does not define.
std::string_view libssh2_error_name(int code);

/// What a libssh2 error code means, in words ("the connection was lost while receiving"),
/// or empty for a code without a description here.
std::string_view libssh2_error_words(int code);

/// The text for an error: libssh2's own message when it gave one, else the code's words,
/// then the code's name and number, as in "the connection was lost while receiving
/// (LIBSSH2_ERROR_SOCKET_RECV, libssh2 -43)".
std::string libssh2_error_text(int code, std::string_view message);

}  // namespace hvdrun::ssh
