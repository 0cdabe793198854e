// libssh2_error_text(): see libssh2_errors.h. The codes are libssh2's public, stable
// numbers (libssh2.h); the table holds them as numbers so that it reads as one list.
#include "ssh/libssh2_errors.h"

#include <array>

namespace hvdrun::ssh {
namespace {

struct Libssh2Error {
  int code;
  std::string_view name;
  std::string_view words;
};

constexpr std::array<Libssh2Error, 49> kErrors = {{
    {-1, "LIBSSH2_ERROR_SOCKET_NONE", "the connection is gone"},
    {-2, "LIBSSH2_ERROR_BANNER_RECV", "the server sent no SSH banner"},
    {-3, "LIBSSH2_ERROR_BANNER_SEND", "the SSH banner could not be sent"},
    {-4, "LIBSSH2_ERROR_INVALID_MAC", "a packet failed its integrity check"},
    {-5, "LIBSSH2_ERROR_KEX_FAILURE", "no key exchange method in common with the server"},
    {-6, "LIBSSH2_ERROR_ALLOC", "out of memory"},
    {-7, "LIBSSH2_ERROR_SOCKET_SEND", "the connection was lost while sending"},
    {-8, "LIBSSH2_ERROR_KEY_EXCHANGE_FAILURE", "the key exchange failed"},
    {-9, "LIBSSH2_ERROR_TIMEOUT", "the operation timed out"},
    {-10, "LIBSSH2_ERROR_HOSTKEY_INIT", "the host key could not be read"},
    {-11, "LIBSSH2_ERROR_HOSTKEY_SIGN", "the host key's signature did not verify"},
    {-12, "LIBSSH2_ERROR_DECRYPT", "a packet could not be decrypted"},
    {-13, "LIBSSH2_ERROR_SOCKET_DISCONNECT", "the server closed the connection"},
    {-14, "LIBSSH2_ERROR_PROTO", "the server broke the SSH protocol"},
    {-15, "LIBSSH2_ERROR_PASSWORD_EXPIRED", "the password has expired"},
    {-16, "LIBSSH2_ERROR_FILE", "a key file could not be read"},
    {-17, "LIBSSH2_ERROR_METHOD_NONE", "no method in common with the server"},
    {-18, "LIBSSH2_ERROR_AUTHENTICATION_FAILED", "the login was refused"},
    {-19, "LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED", "the public key was not accepted"},
    {-20, "LIBSSH2_ERROR_CHANNEL_OUTOFORDER", "channel packets came out of order"},
    {-21, "LIBSSH2_ERROR_CHANNEL_FAILURE", "the server refused the channel"},
    {-22, "LIBSSH2_ERROR_CHANNEL_REQUEST_DENIED", "the server denied the channel request"},
    {-23, "LIBSSH2_ERROR_CHANNEL_UNKNOWN", "the channel is unknown to the server"},
    {-24, "LIBSSH2_ERROR_CHANNEL_WINDOW_EXCEEDED", "the channel's window was exceeded"},
    {-25, "LIBSSH2_ERROR_CHANNEL_PACKET_EXCEEDED", "a channel packet was too large"},
    {-26, "LIBSSH2_ERROR_CHANNEL_CLOSED", "the channel was closed"},
    {-27, "LIBSSH2_ERROR_CHANNEL_EOF_SENT", "the channel's input was already closed"},
    {-28, "LIBSSH2_ERROR_SCP_PROTOCOL", "the SCP protocol failed"},
    {-29, "LIBSSH2_ERROR_ZLIB", "compression failed"},
    {-30, "LIBSSH2_ERROR_SOCKET_TIMEOUT", "the connection timed out"},
    {-31, "LIBSSH2_ERROR_SFTP_PROTOCOL", "the SFTP protocol failed"},
    {-32, "LIBSSH2_ERROR_REQUEST_DENIED", "the server denied the request"},
    {-33, "LIBSSH2_ERROR_METHOD_NOT_SUPPORTED", "the method is not supported"},
    {-34, "LIBSSH2_ERROR_INVAL", "an invalid argument"},
    {-35, "LIBSSH2_ERROR_INVALID_POLL_TYPE", "an invalid poll type"},
    {-36, "LIBSSH2_ERROR_PUBLICKEY_PROTOCOL", "the public key protocol failed"},
    {-37, "LIBSSH2_ERROR_EAGAIN", "the operation would block"},
    {-38, "LIBSSH2_ERROR_BUFFER_TOO_SMALL", "a buffer was too small"},
    {-39, "LIBSSH2_ERROR_BAD_USE", "libssh2 was used wrongly"},
    {-40, "LIBSSH2_ERROR_COMPRESS", "compression failed"},
    {-41, "LIBSSH2_ERROR_OUT_OF_BOUNDARY", "a packet field was out of bounds"},
    {-42, "LIBSSH2_ERROR_AGENT_PROTOCOL", "the SSH agent's protocol failed"},
    {-43, "LIBSSH2_ERROR_SOCKET_RECV", "the connection was lost while receiving"},
    {-44, "LIBSSH2_ERROR_ENCRYPT", "a packet could not be encrypted"},
    {-45, "LIBSSH2_ERROR_BAD_SOCKET", "the connection's socket is not usable"},
    {-46, "LIBSSH2_ERROR_KNOWN_HOSTS", "the known_hosts file could not be used"},
    {-47, "LIBSSH2_ERROR_CHANNEL_WINDOW_FULL", "the channel's window is full"},
    {-48, "LIBSSH2_ERROR_KEYFILE_AUTH_FAILED", "the key file was not accepted"},
    {-49, "LIBSSH2_ERROR_RANDGEN", "random numbers could not be made"},
}};

const Libssh2Error* find(int code) {
  for (const auto& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace

std::string_view libssh2_error_name(int code) {
  const Libssh2Error* e = find(code);
  return e ? e->name : std::string_view();
}

std::string_view libssh2_error_words(int code) {
  const Libssh2Error* e = find(code);
  return e ? e->words : std::string_view();
}

std::string libssh2_error_text(int code, std::string_view message) {
  std::string out(message.empty() ? libssh2_error_words(code) : message);
  if (out.empty()) out = "an error libssh2 did not describe";
  const std::string_view name = libssh2_error_name(code);
  out += " (";
  if (!name.empty()) out += std::string(name) + ", ";
  return out + "libssh2 " + std::to_string(code) + ")";
}

}  // namespace hvdrun::ssh
