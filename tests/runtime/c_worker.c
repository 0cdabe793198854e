/* A rank written in C against hvdrun/hvdrun_c.h (checks that the header is valid C and
 * the C ABI is enough): sums rank+1 across ranks and checks the result. */
#include <stdio.h>

#include "hvdrun/hvdrun_c.h"

int main(void) {
  if (hvdrun_init() != 0) {
    fprintf(stderr, "init: %s\n", hvdrun_last_error());
    return 3;
  }
  int rank = hvdrun_rank(), size = hvdrun_size();
  double v[3] = {rank + 1.0, rank + 1.0, rank + 1.0};
  if (hvdrun_allreduce(v, v, 3, HVDRUN_FLOAT64, HVDRUN_SUM) != 0) {
    fprintf(stderr, "allreduce: %s\n", hvdrun_last_error());
    return 1;
  }
  double want = size * (size + 1) / 2.0;
  int ok = v[0] == want && v[1] == want && v[2] == want;
  if (hvdrun_barrier() != 0 || hvdrun_shutdown() != 0) return 1;
  printf("rank %d: %s\n", rank, ok ? "ok" : "wrong");
  return ok ? 0 : 1;
}
