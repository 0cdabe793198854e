// libssh2's error codes in words: the table agrees with libssh2.h, and a message names the
// code instead of showing a bare number.
#include <catch2/catch.hpp>

#include <libssh2.h>

#include "ssh/libssh2_errors.h"

using hvdrun::ssh::libssh2_error_name;
using hvdrun::ssh::libssh2_error_text;
using hvdrun::ssh::libssh2_error_words;

TEST_CASE("libssh2 error codes have their names and words") {
  CHECK(libssh2_error_name(LIBSSH2_ERROR_SOCKET_RECV) == "LIBSSH2_ERROR_SOCKET_RECV");
  CHECK(libssh2_error_name(LIBSSH2_ERROR_SOCKET_SEND) == "LIBSSH2_ERROR_SOCKET_SEND");
  CHECK(libssh2_error_name(LIBSSH2_ERROR_SOCKET_DISCONNECT) == "LIBSSH2_ERROR_SOCKET_DISCONNECT");
  CHECK(libssh2_error_name(LIBSSH2_ERROR_CHANNEL_CLOSED) == "LIBSSH2_ERROR_CHANNEL_CLOSED");
  CHECK(libssh2_error_name(LIBSSH2_ERROR_TIMEOUT) == "LIBSSH2_ERROR_TIMEOUT");
  CHECK(libssh2_error_name(LIBSSH2_ERROR_AUTHENTICATION_FAILED) ==
        "LIBSSH2_ERROR_AUTHENTICATION_FAILED");
  CHECK(libssh2_error_name(LIBSSH2_ERROR_RANDGEN) == "LIBSSH2_ERROR_RANDGEN");
  for (int code = LIBSSH2_ERROR_RANDGEN; code <= LIBSSH2_ERROR_SOCKET_NONE; ++code) {
    INFO("code " << code);
    CHECK_FALSE(libssh2_error_name(code).empty());
    CHECK_FALSE(libssh2_error_words(code).empty());
  }
  CHECK(libssh2_error_name(-999).empty());
}

TEST_CASE("an error's text: libssh2's message or the code's words, then the code") {
  CHECK(libssh2_error_text(-43, "") ==
        "the connection was lost while receiving (LIBSSH2_ERROR_SOCKET_RECV, libssh2 -43)");
  CHECK(libssh2_error_text(-13, "Socket disconnect") ==
        "Socket disconnect (LIBSSH2_ERROR_SOCKET_DISCONNECT, libssh2 -13)");
  CHECK(libssh2_error_text(-999, "") == "an error libssh2 did not describe (libssh2 -999)");
}
