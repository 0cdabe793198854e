// counted(): a count with its noun, so no message says "1 ranks".
#include <catch2/catch.hpp>

#include "common/plural.h"

TEST_CASE("a count takes the singular for one and the plural otherwise") {
  using hvdrun::counted;
  CHECK(counted(1, "rank") == "1 rank");
  CHECK(counted(0, "rank") == "0 ranks");
  CHECK(counted(2, "usable slot") == "2 usable slots");
  CHECK(counted(1024, "host") == "1024 hosts");
}
