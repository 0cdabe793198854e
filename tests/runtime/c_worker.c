/* A rank written in C against hvdrun/hvdrun_c.h (checks that the header is valid C and
 * the C ABI is enough). Modes:
 *   (none)      sums rank+1 across ranks and checks the result, then every op on int32
 *               and float64 in a cycle that changes op, type or count at every call
 *   async       ABI version 2: asynchronous collectives waited for out of order, polling,
 *               blocking calls ordered after earlier submissions, bad handles and
 *               arguments, back-to-back allgathers and broadcasts of one size, join,
 *               device calls without NCCL
 *   async-lost  rank 1 exits right after init; the others' queued collectives fail with
 *               the cause, and collectives submitted later fail at once naming it
 *   negotiate   ABI version 3: a size mismatch fails on every rank naming both sides and
 *               the next collective succeeds; an op mismatch after repeated plain calls;
 *               named collectives in different orders; a name in flight refused; join
 *               standing in for an allreduce (Min: the identity); init after shutdown
 *   scatter     ABI version 4: alltoall with uneven splits and received splits, an output
 *               too small refused on every rank, reducescatter with uneven rows, and a
 *               caller compiled for ABI 3 (the shorter struct) still accepted
 *   stuck       the stack report: rank 1 blocks in stuck_in_c() (pause), the others wait in
 *               an allreduce it never issues; each says "ready" first
 *   homogeneous ABI version 8: prints "rank R: homogeneous=H" (the test compares the ranks'
 *               answers with the layout's); -1 after shutdown */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hvdrun/hvdrun_c.h"

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "rank %d: check failed at line %d: %s (last error: %s)\n", rank, __LINE__, \
              #cond, hvdrun_last_error());                                                       \
      return 1;                                                                                  \
    }                                                                                            \
  } while (0)

static int rank = -1;

static int sum_mode(void) {
  int size = hvdrun_size();
  double v[3] = {rank + 1.0, rank + 1.0, rank + 1.0};
  if (hvdrun_allreduce(v, v, 3, HVDRUN_FLOAT64, HVDRUN_SUM) != 0) {
    fprintf(stderr, "allreduce: %s\n", hvdrun_last_error());
    return 1;
  }
  double want = size * (size + 1) / 2.0;
  int ok = v[0] == want && v[1] == want && v[2] == want;
  /* Every op on int32 and float64, 1 and 3 elements, cycled so that each call differs from
   * the last in op, type or count and each repeats: what one thread's kept request and the
   * engine's cached one must follow. */
  const hvdrun_op ops[] = {HVDRUN_SUM, HVDRUN_MIN, HVDRUN_MAX, HVDRUN_PRODUCT, HVDRUN_AVERAGE};
  long long sum = 0, product = 1;
  for (int r = 1; r <= size; ++r) {
    sum += r;
    product *= r;
  }
  const long long wanted[] = {sum, 1, size, product, sum / size};
  for (int i = 0; i < 60 && ok; ++i) {
    const int o = i % 5, as_double = (i / 5) % 2;
    const size_t count = (size_t)((i / 10) % 2 == 0 ? 1 : 3);
    if (as_double) {
      double d[3] = {rank + 1.0, rank + 1.0, rank + 1.0};
      const double w = ops[o] == HVDRUN_AVERAGE ? (double)sum / size : (double)wanted[o];
      if (hvdrun_allreduce(d, d, count, HVDRUN_FLOAT64, ops[o]) != 0) return 1;
      for (size_t k = 0; k < count; ++k) ok = ok && d[k] == w;
    } else {
      int n[3] = {rank + 1, rank + 1, rank + 1};
      if (hvdrun_allreduce(n, n, count, HVDRUN_INT32, ops[o]) != 0) return 1;
      for (size_t k = 0; k < count; ++k) ok = ok && n[k] == (int)wanted[o];
    }
    if (!ok)
      fprintf(stderr, "rank %d: call %d (op %d, %s[%zu]) wrong\n", rank, i, (int)ops[o],
              as_double ? "float64" : "int32", count);
  }
  if (hvdrun_barrier() != 0) return 1;
  printf("rank %d: %s\n", rank, ok ? "ok" : "wrong");
  return ok ? 0 : 1;
}

enum { kOps = 12, kMax = 100000 };

static int async_mode(void) {
  int size = hvdrun_size();
  CHECK(hvdrun_abi_version() == HVDRUN_ABI_VERSION && HVDRUN_ABI_VERSION >= 2);
  CHECK(strlen(hvdrun_version()) > 0);
  CHECK(hvdrun_is_initialized() == 1);
  CHECK(hvdrun_generation() == 0);

  /* Many allreduces of different sizes in flight at once, waited for in reverse. */
  static float bufs[kOps][kMax];
  hvdrun_handle h[kOps];
  for (int k = 0; k < kOps; ++k) {
    size_t n = (size_t)1 + (size_t)k * 7919 % kMax;
    for (size_t i = 0; i < n; ++i) bufs[k][i] = (float)(rank + k + (int)(i % 5));
    h[k] = hvdrun_allreduce_async(bufs[k], bufs[k], n, HVDRUN_FLOAT32, HVDRUN_SUM);
    CHECK(h[k] > 0);
  }
  CHECK(hvdrun_pending() >= kOps);
  for (int k = kOps - 1; k >= 0; --k) {
    CHECK(hvdrun_poll(h[k]) >= 0);
    CHECK(hvdrun_wait(h[k]) == 0);
    size_t n = (size_t)1 + (size_t)k * 7919 % kMax;
    const int rank_sum = size * (size - 1) / 2; /* exact: size * (size - 1) is even */
    for (size_t i = 0; i < n; ++i) {
      const int want = rank_sum + size * (k + (int)(i % 5));
      CHECK(bufs[k][i] == (float)want);
    }
  }
  CHECK(hvdrun_pending() == 0);

  /* A handle is gone once waited for; an unknown one is refused, with a message. */
  CHECK(hvdrun_poll(h[0]) == -1);
  CHECK(hvdrun_wait(h[0]) == -1);
  CHECK(strstr(hvdrun_last_error(), "unknown or was already waited for") != NULL);
  CHECK(hvdrun_wait(987654321) == -1);

  /* Broadcast, allgather, out-of-place min and a barrier, all asynchronous at once. */
  long long b[4] = {rank, rank, rank, rank};
  int g_send[2] = {rank, -rank};
  int* g_recv = calloc((size_t)size * 2, sizeof(int));
  double m_send = 10.0 + rank, m_recv = 0;
  hvdrun_handle hb = hvdrun_broadcast_async(b, 4, HVDRUN_INT64, size - 1);
  hvdrun_handle hg = hvdrun_allgather_async(g_send, g_recv, 2, HVDRUN_INT32);
  hvdrun_handle hm = hvdrun_allreduce_async(&m_send, &m_recv, 1, HVDRUN_FLOAT64, HVDRUN_MIN);
  hvdrun_handle hz = hvdrun_barrier_async();
  CHECK(hb > 0 && hg > 0 && hm > 0 && hz > 0);
  /* A blocking call runs after everything submitted before it. */
  int one = 1;
  CHECK(hvdrun_allreduce(&one, &one, 1, HVDRUN_INT32, HVDRUN_SUM) == 0);
  CHECK(one == size);
  CHECK(hvdrun_poll(hb) == 1 && hvdrun_poll(hg) == 1 && hvdrun_poll(hm) == 1);
  CHECK(hvdrun_poll(hz) == 1);
  CHECK(hvdrun_wait(hz) == 0 && hvdrun_wait(hm) == 0 && hvdrun_wait(hg) == 0);
  CHECK(hvdrun_wait(hb) == 0);
  for (int i = 0; i < 4; ++i) CHECK(b[i] == size - 1);
  for (int r = 0; r < size; ++r) CHECK(g_recv[2 * r] == r && g_recv[2 * r + 1] == -r);
  CHECK(m_recv == 10.0 && m_send == 10.0 + rank);
  free(g_recv);

  /* Bad arguments fail at submission, with the reason, and queue nothing. */
  CHECK(hvdrun_allreduce_async(NULL, NULL, 4, HVDRUN_FLOAT32, HVDRUN_SUM) == -1);
  CHECK(strstr(hvdrun_last_error(), "null buffer") != NULL);
  CHECK(hvdrun_broadcast_async(b, 4, HVDRUN_INT64, size) == -1);
  CHECK(strstr(hvdrun_last_error(), "is not a rank") != NULL);
  CHECK(hvdrun_allreduce_async(b, b, 4, (hvdrun_dtype)42, HVDRUN_SUM) == -1);
  CHECK(hvdrun_pending() == 0);

  /* No GPU here (the test sets HVDRUN_NCCL=off): device calls fail at once, saying why. */
  CHECK(hvdrun_nccl_available() == 0);
  CHECK(strlen(hvdrun_nccl_status()) > 0);
  CHECK(hvdrun_allreduce_device_async(b, b, 4, HVDRUN_INT64, HVDRUN_SUM, NULL) == -1);
  CHECK(strstr(hvdrun_last_error(), "NCCL") != NULL);
  CHECK(hvdrun_broadcast_device(b, 4, HVDRUN_INT64, 0, NULL) == -1);

  /* ABI 7: the library applies the scale factors to host buffers, once; a caller built for
   * ABI 6 (the shorter structure) applies them itself and the library only agrees on them;
   * factors on device buffers are refused unless the caller applies them. */
  {
    float in[3] = {2.0f, -4.0f, 1.0f + (float)rank}, out[3] = {0, 0, 0};
    hvdrun_collective c;
    memset(&c, 0, sizeof c);
    c.kind = HVDRUN_KIND_ALLREDUCE;
    c.send = in;
    c.recv = out;
    c.count = 3;
    c.dtype = HVDRUN_FLOAT32;
    c.op = HVDRUN_AVERAGE;
    c.prescale = 0.5;
    c.postscale = 3.0;
    CHECK(hvdrun_run(&c, sizeof c) == 0);
    /* (rank_sum of 1 + r) / size: exact for the sizes the test runs (1, 2, 4). */
    const float mean = 1.0f + (float)(size - 1) / 2.0f;
    CHECK(out[0] == 3.0f && out[1] == -6.0f && out[2] == mean * 0.5f * 3.0f);
    CHECK(in[0] == 2.0f && in[2] == 1.0f + (float)rank); /* the input is left alone */
    CHECK(hvdrun_run(&c, offsetof(hvdrun_collective, caller_scales)) == 0);
    CHECK(out[0] == 2.0f && out[1] == -4.0f && out[2] == mean);
    c.device = 1;
    c.send = c.recv = b;
    c.dtype = HVDRUN_INT64;
    CHECK(hvdrun_run(&c, sizeof c) == HVDRUN_INVALID_ARGUMENT);
    CHECK(strstr(hvdrun_last_error(), "caller_scales") != NULL);
  }

  /* Back-to-back collectives of one size reuse the library's buffers: a fast rank's
   * next call must never overwrite a slow rank's result before it was copied out. */
  {
    int ag_in[3], *ag_out = calloc((size_t)size * 3, sizeof(int));
    long long bc[5];
    for (int i = 0; i < 200; ++i) {
      for (int j = 0; j < 3; ++j) ag_in[j] = i * 100 + rank;
      CHECK(hvdrun_allgather(ag_in, ag_out, 3, HVDRUN_INT32) == 0);
      for (int r = 0; r < size; ++r)
        for (int j = 0; j < 3; ++j) CHECK(ag_out[3 * r + j] == i * 100 + r);
      int root = i % size;
      for (int j = 0; j < 5; ++j) bc[j] = rank == root ? i : -1;
      CHECK(hvdrun_broadcast(bc, 5, HVDRUN_INT64, root) == 0);
      for (int j = 0; j < 5; ++j) CHECK(bc[j] == i);
    }
    free(ag_out);
  }

  /* join: every rank learns the same last rank. */
  int last = hvdrun_join();
  CHECK(last >= 0 && last < size);
  int lo = last, hi = last;
  CHECK(hvdrun_allreduce(&lo, &lo, 1, HVDRUN_INT32, HVDRUN_MIN) == 0);
  CHECK(hvdrun_allreduce(&hi, &hi, 1, HVDRUN_INT32, HVDRUN_MAX) == 0);
  CHECK(lo == last && hi == last);
  printf("rank %d: async ok\n", rank);
  return 0;
}

static int async_lost_mode(void) {
  if (rank == 1) _exit(0); /* gone without a word, right after init */
  float v[1024];
  for (int i = 0; i < 1024; ++i) v[i] = 1.0f;
  hvdrun_handle h1 = hvdrun_allreduce_async(v, v, 1024, HVDRUN_FLOAT32, HVDRUN_SUM);
  hvdrun_handle h2 = hvdrun_allreduce_async(v, v, 1024, HVDRUN_FLOAT32, HVDRUN_SUM);
  CHECK(h1 > 0 && h2 > 0);
  CHECK(hvdrun_wait(h1) == -1);
  fprintf(stderr, "rank %d: first: %s\n", rank, hvdrun_last_error());
  CHECK(strstr(hvdrun_last_error(), "rank") != NULL);
  CHECK(hvdrun_wait(h2) == -1);
  CHECK(strstr(hvdrun_last_error(), "earlier collective failed") != NULL);
  hvdrun_handle h3 = hvdrun_barrier_async();
  CHECK(h3 > 0);
  CHECK(hvdrun_wait(h3) == -1);
  CHECK(strstr(hvdrun_last_error(), "earlier collective failed") != NULL);
  /* Shutdown after a failure leaves at once: no final barrier with a lost peer. */
  CHECK(hvdrun_shutdown() == 0);
  CHECK(hvdrun_is_initialized() == 0);
  printf("rank %d: lost peer reported\n", rank);
  return 0;
}

static hvdrun_collective named_sum(const char* name, float* buf, size_t count) {
  hvdrun_collective c;
  memset(&c, 0, sizeof c);
  c.kind = HVDRUN_KIND_ALLREDUCE;
  c.send = buf;
  c.recv = buf;
  c.count = count;
  c.dtype = HVDRUN_FLOAT32;
  c.op = HVDRUN_SUM;
  c.name = name;
  return c;
}

static int negotiate_mode(void) {
  int size = hvdrun_size();
  CHECK(hvdrun_abi_version() >= 3);
  /* Rank 0 has 10 elements, the others 3: refused on every rank, naming both sides. */
  float big[10] = {0};
  hvdrun_collective bad = named_sum("grad.fc1", big, rank == 0 ? 10 : 3);
  CHECK(hvdrun_run(&bad, sizeof bad) == -1);
  CHECK(strstr(hvdrun_last_error(),
               "allreduce 'grad.fc1': rank 0 has float32[10], rank 1 has float32[3]") != NULL);
  /* The job goes on. */
  float one = 1.0f;
  hvdrun_collective ok = named_sum("after", &one, 1);
  CHECK(hvdrun_run(&ok, sizeof ok) == 0);
  CHECK(one == (float)size);
  /* The plain call (hvdrun_allreduce) repeated, then with another op on rank 0 only: the
   * request a thread keeps for its plain calls must follow the op, or this would pass. */
  int p2[2];
  for (int i = 0; i < 3; ++i) {
    p2[0] = p2[1] = rank + 1;
    CHECK(hvdrun_allreduce(p2, p2, 2, HVDRUN_INT32, HVDRUN_SUM) == 0);
    CHECK(p2[0] == size * (size + 1) / 2 && p2[1] == p2[0]);
  }
  CHECK(hvdrun_allreduce(p2, p2, 2, HVDRUN_INT32, rank == 0 ? HVDRUN_MAX : HVDRUN_SUM) == -1);
  CHECK(strstr(hvdrun_last_error(), "rank 0 reduces with Max") != NULL);
  p2[0] = p2[1] = rank + 1;
  CHECK(hvdrun_allreduce(p2, p2, 2, HVDRUN_INT32, HVDRUN_SUM) == 0);
  CHECK(p2[0] == size * (size + 1) / 2);
  /* Named collectives submitted in different orders still meet. */
  float a = 1.0f, b = 2.0f;
  hvdrun_collective ca = named_sum("a", &a, 1), cb = named_sum("b", &b, 1);
  hvdrun_handle ha, hb;
  if (rank % 2 == 0) {
    ha = hvdrun_submit(&ca, sizeof ca);
    hb = hvdrun_submit(&cb, sizeof cb);
  } else {
    hb = hvdrun_submit(&cb, sizeof cb);
    ha = hvdrun_submit(&ca, sizeof ca);
  }
  CHECK(ha > 0 && hb > 0);
  /* A second collective named "a" while the first is in flight is refused. */
  float c2 = 0.0f;
  hvdrun_collective again = named_sum("a", &c2, 1);
  CHECK(hvdrun_submit(&again, sizeof again) == HVDRUN_DUPLICATE_NAME);
  CHECK(strstr(hvdrun_last_error(), "still in flight") != NULL);
  CHECK(hvdrun_wait(hb) == 0 && hvdrun_wait(ha) == 0);
  CHECK(a == (float)size && b == 2.0f * size);
  CHECK(hvdrun_sequence(ha) == -2); /* waited for: unknown */
  /* join: rank 0 joins at once and stands in with Min's identity. */
  int last;
  if (rank == 0) {
    last = hvdrun_join();
  } else {
    int v = rank;
    CHECK(hvdrun_allreduce(&v, &v, 1, HVDRUN_INT32, HVDRUN_MIN) == 0);
    CHECK(v == 1);
    last = hvdrun_join();
  }
  CHECK(last >= 1 && last < size); /* rank 0 joined first, in an earlier round */
  int lo = last, hi = last;
  CHECK(hvdrun_allreduce(&lo, &lo, 1, HVDRUN_INT32, HVDRUN_MIN) == 0);
  CHECK(hvdrun_allreduce(&hi, &hi, 1, HVDRUN_INT32, HVDRUN_MAX) == 0);
  CHECK(lo == last && hi == last);
  /* init again after shutdown: a fresh check-in of the same job. */
  CHECK(hvdrun_shutdown() == 0);
  CHECK(hvdrun_init() == 0);
  int s = 1;
  CHECK(hvdrun_allreduce(&s, &s, 1, HVDRUN_INT32, HVDRUN_SUM) == 0);
  CHECK(s == size);
  CHECK(hvdrun_shutdown() == 0);
  printf("rank %d: negotiate ok\n", rank);
  return 0;
}

/* An in-place float32 Sum allreduce of the one element at `v`, over every rank. */
static hvdrun_collective one_float_sum(float* v) {
  hvdrun_collective c;
  memset(&c, 0, sizeof c);
  c.kind = HVDRUN_KIND_ALLREDUCE;
  c.send = c.recv = v;
  c.count = 1;
  c.dtype = HVDRUN_FLOAT32;
  c.op = HVDRUN_SUM;
  return c;
}

static int scatter_mode(void) {
  int size = hvdrun_size();
  CHECK(hvdrun_abi_version() >= 9);
  /* alltoall: rank r sends j + 1 ints to rank j, each r * 100 + j. */
  long long splits[64], received[64];
  int send[64 * 65 / 2], recv[64 * 64];
  CHECK(size <= 64);
  int k = 0;
  for (int j = 0; j < size; ++j) {
    splits[j] = j + 1;
    for (int i = 0; i <= j; ++i) send[k++] = rank * 100 + j;
  }
  hvdrun_collective c;
  memset(&c, 0, sizeof c);
  c.kind = HVDRUN_KIND_ALLTOALL;
  c.send = send;
  c.recv = recv;
  c.count = (size_t)k;
  c.dtype = HVDRUN_INT32;
  c.splits = splits;
  c.received_splits = received;
  c.recv_count = (size_t)size * (size_t)(rank + 1);
  CHECK(hvdrun_run(&c, sizeof c) == 0);
  for (int i = 0; i < size; ++i) {
    CHECK(received[i] == rank + 1);
    for (int r = 0; r <= rank; ++r) CHECK(recv[i * (rank + 1) + r] == i * 100 + rank);
  }
  /* Rank 0's output is one element short: refused on every rank before data moves. */
  c.recv_count = (size_t)size * (size_t)(rank + 1) - (rank == 0 ? 1u : 0u);
  CHECK(hvdrun_run(&c, sizeof c) == -1);
  CHECK(strstr(hvdrun_last_error(), "rank 0 is sent") != NULL);
  /* reducescatter of 7 rows of 2: ranks below 7 % size get one row more, the split the
   * library tells a binding (ABI 7), which refuses what no rank could run. */
  CHECK(hvdrun_reducescatter_rows(7, 0) == 7 / size + (rank < 7 % size ? 1 : 0));
  CHECK(hvdrun_reducescatter_rows(0, 0) == 0);
  CHECK(hvdrun_reducescatter_rows(-1, 0) == -1);
  CHECK(strstr(hvdrun_last_error(), "cannot be negative") != NULL);
  CHECK(hvdrun_reducescatter_rows(7, 9999) == -1);
  CHECK(strstr(hvdrun_last_error(), "does not exist") != NULL);
  float rows[14], mine[8];
  long long shape[2] = {7, 2};
  for (int i = 0; i < 14; ++i) rows[i] = (float)(i * (rank + 1));
  memset(&c, 0, sizeof c);
  c.kind = HVDRUN_KIND_REDUCESCATTER;
  c.send = rows;
  c.recv = mine;
  c.count = 14;
  c.dtype = HVDRUN_FLOAT32;
  c.op = HVDRUN_SUM;
  c.shape = shape;
  c.ndim = 2;
  CHECK(hvdrun_run(&c, sizeof c) == 0);
  int first = 0;
  for (int r = 0; r < rank; ++r) first += 7 / size + (r < 7 % size ? 1 : 0);
  int own = 7 / size + (rank < 7 % size ? 1 : 0);
  for (int i = 0; i < own * 2; ++i) {
    const long long expect = (long long)(first * 2 + i) * size * (size + 1) / 2; /* exact */
    CHECK(mine[i] == (float)expect);
  }
  /* A rank's own wrong arguments are refused on that rank alone (ABI 9), and the job goes
   * on: an allreduce in a set of rank 0 only, which the others are not in, and an element
   * type that does not exist. */
  const int first_rank = 0;
  const int only_first = hvdrun_add_process_set(&first_rank, 1);
  CHECK(only_first > 0);
  float seven = 7.0f;
  c = one_float_sum(&seven);
  c.process_set = only_first;
  if (rank == 0) {
    CHECK(hvdrun_run(&c, sizeof c) == 0);
    CHECK(seven == 7.0f);
  } else {
    CHECK(hvdrun_run(&c, sizeof c) == HVDRUN_INVALID_ARGUMENT);
    CHECK(strstr(hvdrun_last_error(), "is not in process set") != NULL);
    CHECK(hvdrun_submit(&c, sizeof c) == HVDRUN_INVALID_ARGUMENT);
  }
  c.process_set = 0;
  c.dtype = (hvdrun_dtype)42;
  CHECK(hvdrun_submit(&c, sizeof c) == HVDRUN_INVALID_ARGUMENT);
  CHECK(strstr(hvdrun_last_error(), "unknown data type 42") != NULL);
  CHECK(hvdrun_remove_process_set(only_first) == 1);
  /* An ABI 3 caller passes the struct without the fields after postscale. */
  float one = 1.0f;
  c = one_float_sum(&one);
  CHECK(hvdrun_run(&c, offsetof(hvdrun_collective, splits)) == 0);
  CHECK(one == (float)size);
  CHECK(hvdrun_shutdown() == 0);
  printf("rank %d: scatter ok\n", rank);
  return 0;
}

static int homogeneous_mode(void) {
  CHECK(hvdrun_abi_version() >= 8);
  const int homogeneous = hvdrun_is_homogeneous();
  CHECK(homogeneous == 0 || homogeneous == 1);
  CHECK(hvdrun_shutdown() == 0);
  CHECK(hvdrun_is_homogeneous() == -1);
  printf("rank %d: homogeneous=%d\n", rank, homogeneous);
  return 0;
}

/* Not inlined and exported (the worker links with ENABLE_EXPORTS): the stack report's native
 * frames name it. */
__attribute__((noinline)) void stuck_in_c(void) {
  for (;;) pause();
}

static int stuck_mode(void) {
  printf("ready\n");
  fflush(stdout);
  if (rank == 1) stuck_in_c();
  float v[4] = {1, 2, 3, 4};
  return hvdrun_allreduce(v, v, 4, HVDRUN_FLOAT32, HVDRUN_SUM) == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "sum";
  if (hvdrun_init() != 0) {
    fprintf(stderr, "init: %s\n", hvdrun_last_error());
    return 3;
  }
  rank = hvdrun_rank();
  int rc;
  if (strcmp(mode, "async") == 0)
    rc = async_mode();
  else if (strcmp(mode, "negotiate") == 0)
    return negotiate_mode();
  else if (strcmp(mode, "scatter") == 0)
    return scatter_mode();
  else if (strcmp(mode, "stuck") == 0)
    return stuck_mode();
  else if (strcmp(mode, "homogeneous") == 0)
    return homogeneous_mode();
  else if (strcmp(mode, "async-lost") == 0)
    rc = async_lost_mode();
  else
    rc = sum_mode();
  if (hvdrun_shutdown() != 0) {
    fprintf(stderr, "shutdown: %s\n", hvdrun_last_error());
    return 1;
  }
  return rc;
}
