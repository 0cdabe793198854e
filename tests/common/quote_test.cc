// Unit tests of common/quote: one way to show user text in a message, one way to write it
// into JSON output (hvdrun check --json, --dry-run --json).
#include "common/quote.h"

#include <catch2/catch.hpp>
#include <string>

namespace hvdrun {
namespace {

TEST_CASE("json_quote escapes what JSON requires and keeps UTF-8 whole", "[common][quote]") {
  CHECK(json_quote("") == "\"\"");
  CHECK(json_quote("node1") == "\"node1\"");
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("l1\nl2\r\t") == "\"l1\\nl2\\r\\t\"");
  CHECK(json_quote(std::string("nul\0x", 5)) == "\"nul\\u0000x\"");
  CHECK(json_quote("\x1b[0m") == "\"\\u001b[0m\"");
  CHECK(json_quote("h\xc3\xb4te") == "\"h\xc3\xb4te\"");
}

TEST_CASE("quote keeps a message on one line", "[common][quote]") {
  CHECK(quote("a\nb") == "'a\\nb'");
  CHECK(quote(std::string(200, 'x')).size() < 100);
  CHECK(quote("\xff") == "'\\xff'");
}

TEST_CASE("quote tells a control byte from the text of its escape", "[common][quote]") {
  // The byte 0x07, and the four characters \x07 a user typed: never shown alike.
  CHECK(quote("a\x07"
              "b") == "'a\\x07b'");
  CHECK(quote("a\\x07b") == "'a\\\\x07b'");
  CHECK(quote("\\") == "'\\\\'");
}

}  // namespace
}  // namespace hvdrun
