/* libhvdrun's C ABI: the functions a C program or Python ctypes calls to join an hvdrun
 * job and run collectives on host memory. Every function returning int returns 0 on
 * success and a negative value on failure; hvdrun_last_error() then says why. */
#ifndef HVDRUN_HVDRUN_C_H_
#define HVDRUN_HVDRUN_C_H_

#include <stddef.h>

#if defined(__GNUC__)
#define HVDRUN_C_API __attribute__((visibility("default")))
#else
#define HVDRUN_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Element types; values are stable. */
typedef enum hvdrun_dtype {
  HVDRUN_INT32 = 0,
  HVDRUN_INT64 = 1,
  HVDRUN_FLOAT32 = 2,
  HVDRUN_FLOAT64 = 3,
  HVDRUN_FLOAT16 = 4,
  HVDRUN_BFLOAT16 = 5,
  HVDRUN_UINT8 = 6
} hvdrun_dtype;

/** Reductions; values are stable. AVERAGE is SUM divided by the world size. */
typedef enum hvdrun_op {
  HVDRUN_SUM = 0,
  HVDRUN_AVERAGE = 1,
  HVDRUN_MIN = 2,
  HVDRUN_MAX = 3,
  HVDRUN_PRODUCT = 4
} hvdrun_op;

/** Joins the job described by the HVDRUN_* environment (set by hvdrun). Idempotent. */
HVDRUN_C_API int hvdrun_init(void);
/** This process's rank in [0, size), or -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_rank(void);
/** Number of ranks in the job, or -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_size(void);
/** Rank among the ranks on this host, or -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_local_rank(void);
/** Number of ranks on this host, or -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_local_size(void);
/** Index of this host among the hosts, or -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_cross_rank(void);
/** Number of hosts with a rank of this local_rank, or -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_cross_size(void);
/** Reduces `count` elements of `send` across all ranks into `recv` (in place when
 *  send == recv). Host memory. */
HVDRUN_C_API int hvdrun_allreduce(const void* send, void* recv, size_t count, hvdrun_dtype dtype,
                                  hvdrun_op op);
/** Copies `count` elements of `buf` on rank `root` to `buf` on every rank. */
HVDRUN_C_API int hvdrun_broadcast(void* buf, size_t count, hvdrun_dtype dtype, int root);
/** Concatenates `count` elements from every rank, in rank order, into `recv`
 *  (size * count elements). */
HVDRUN_C_API int hvdrun_allgather(const void* send, void* recv, size_t count, hvdrun_dtype dtype);
/** Returns once every rank has entered the barrier. */
HVDRUN_C_API int hvdrun_barrier(void);
/** Leaves the job and releases communicators. Idempotent. */
HVDRUN_C_API int hvdrun_shutdown(void);
/** Message of the last failure on this thread ("" when none). Valid until the next call. */
HVDRUN_C_API const char* hvdrun_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HVDRUN_HVDRUN_C_H_ */
