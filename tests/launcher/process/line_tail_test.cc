// LineTail: the last lines of a stream, whatever the chunking and volume.
#include <catch2/catch.hpp>

#include "launcher/process/line_tail.h"

using hvdrun::launcher::LineTail;
using Lines = std::vector<std::string>;

TEST_CASE("keeps the last lines including an unterminated one") {
  LineTail t(3);
  t.add("a\nb");
  t.add("c\nd\ne");
  CHECK(t.lines() == Lines{"bc", "d", "e"});
  t.add("\n");
  CHECK(t.lines() == Lines{"bc", "d", "e"});
}

TEST_CASE("a chunk with many lines replaces everything before it") {
  LineTail t(2);
  t.add("old\npartial");
  std::string big;
  for (int i = 0; i < 1000; ++i) big += "l" + std::to_string(i) + "\n";
  t.add(big);
  CHECK(t.lines() == Lines{"l998", "l999"});
}

TEST_CASE("long lines are cut") {
  LineTail t(2, 4);
  t.add("abcdefgh\nxy");
  CHECK(t.lines() == Lines{"abcd...", "xy"});
}

TEST_CASE("zero lines keeps nothing") {
  LineTail t(0);
  t.add("a\nb\n");
  CHECK(t.lines().empty());
}
