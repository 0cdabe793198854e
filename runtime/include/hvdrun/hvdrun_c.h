/* libhvdrun's C ABI: the functions a C program or Python ctypes calls to join an hvdrun
 * job and run collectives, on host memory (shared memory, the frame mesh across hosts) or
 * CUDA device memory (NCCL), blocking or asynchronously through handles. Every function
 * returning int returns 0 on success and a negative value on failure (hvdrun_last_error()).
 *
 * Versioning: HVDRUN_ABI_VERSION counts additions. Functions are only ever added within
 * one SONAME (libhvdrun.so.0); an existing signature or meaning never changes. A binding
 * checks hvdrun_abi_version() >= the version it needs before calling newer functions.
 *   1  init, queries, blocking host collectives, barrier, shutdown, last_error
 *   2  asynchronous collectives with handles (poll, wait), device (CUDA stream) variants,
 *      version, is_initialized, nccl_available, nccl_status, generation, join
 *   3  negotiated collectives: hvdrun_collective, submit, run, sequence (names, shapes,
 *      scale factors agreed before data moves); join stands in for the others
 *
 * Agreement: before any data moves, the ranks agree on each collective (kind, element
 * type and count, shape, op, root, scale factors, device). Named collectives (version 3)
 * match by name whatever order ranks submit them in; unnamed ones match by their order
 * among the rank's unnamed collectives. A disagreement fails that collective on every
 * rank that submitted it, naming both sides, and the job goes on. Collectives run one at
 * a time on a background thread, in an order every rank agrees on (the submission order
 * when ranks submit the same collectives in the same order). After a collective fails
 * for good (a peer lost, a timeout), every collective submitted later fails at once with
 * that cause: the job is over. */
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

/** The ABI version this library implements (HVDRUN_ABI_VERSION of its build). */
#define HVDRUN_ABI_VERSION 9

/** Identifies one submitted asynchronous collective; valid (> 0) until hvdrun_wait. */
typedef long long hvdrun_handle;

/** Joins the job described by the HVDRUN_* environment (set by hvdrun); without any of
 * its job variables, runs as a single process (rank 0 of 1). Idempotent. */
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
/** Waits for every submitted collective, leaves the job and releases communicators.
 *  Idempotent. After a failed collective it leaves at once, without a final barrier. */
HVDRUN_C_API int hvdrun_shutdown(void);
/* ---- ABI version 2 ---------------------------------------------------------------- */

/** HVDRUN_ABI_VERSION of this library (callable before hvdrun_init). */
HVDRUN_C_API int hvdrun_abi_version(void);
/** Library version, e.g. "0.1.0" (callable before hvdrun_init). */
HVDRUN_C_API const char* hvdrun_version(void);
/** 1 between hvdrun_init and hvdrun_shutdown, else 0. */
HVDRUN_C_API int hvdrun_is_initialized(void);
/** HVDRUN_GENERATION of this job (0 unless restarted by an elastic launcher), or -1
 *  before hvdrun_init. */
HVDRUN_C_API int hvdrun_generation(void);
/** 1 when an NCCL communicator was built (device collectives work), 0 when not, -1
 *  before hvdrun_init. */
HVDRUN_C_API int hvdrun_nccl_available(void);
/** Why NCCL is unavailable ("" when available). Valid until the next call on this thread. */
HVDRUN_C_API const char* hvdrun_nccl_status(void);

/** Submits an allreduce of host memory (as hvdrun_allreduce); returns its handle (> 0)
 *  at once, or -1 when it cannot be submitted (bad argument, not initialised). The
 *  buffers must stay valid and untouched until hvdrun_wait returns. */
HVDRUN_C_API hvdrun_handle hvdrun_allreduce_async(const void* send, void* recv, size_t count,
                                                  hvdrun_dtype dtype, hvdrun_op op);
/** Submits a broadcast of host memory (as hvdrun_broadcast). */
HVDRUN_C_API hvdrun_handle hvdrun_broadcast_async(void* buf, size_t count, hvdrun_dtype dtype,
                                                  int root);
/** Submits an allgather of host memory (as hvdrun_allgather). */
HVDRUN_C_API hvdrun_handle hvdrun_allgather_async(const void* send, void* recv, size_t count,
                                                  hvdrun_dtype dtype);
/** Submits a barrier. */
HVDRUN_C_API hvdrun_handle hvdrun_barrier_async(void);

/** Device memory: `send`/`recv`/`buf` are CUDA device pointers and the NCCL operation is
 *  enqueued on `cuda_stream` (a cudaStream_t; NULL is the legacy default stream). The
 *  handle completes once the operation is enqueued on the stream: work the caller
 *  enqueues on that stream afterwards sees the result; the host must synchronise the
 *  stream before reading the memory itself. Fails when NCCL is unavailable
 *  (hvdrun_nccl_status says why). */
HVDRUN_C_API hvdrun_handle hvdrun_allreduce_device_async(const void* send, void* recv, size_t count,
                                                         hvdrun_dtype dtype, hvdrun_op op,
                                                         void* cuda_stream);
/** Device broadcast from `root`, enqueued on `cuda_stream`. */
HVDRUN_C_API hvdrun_handle hvdrun_broadcast_device_async(void* buf, size_t count,
                                                         hvdrun_dtype dtype, int root,
                                                         void* cuda_stream);
/** Device allgather (size * count elements into `recv`), enqueued on `cuda_stream`. */
HVDRUN_C_API hvdrun_handle hvdrun_allgather_device_async(const void* send, void* recv, size_t count,
                                                         hvdrun_dtype dtype, void* cuda_stream);
/** Blocking forms of the three device collectives (return once enqueued). */
HVDRUN_C_API int hvdrun_allreduce_device(const void* send, void* recv, size_t count,
                                         hvdrun_dtype dtype, hvdrun_op op, void* cuda_stream);
HVDRUN_C_API int hvdrun_broadcast_device(void* buf, size_t count, hvdrun_dtype dtype, int root,
                                         void* cuda_stream);
HVDRUN_C_API int hvdrun_allgather_device(const void* send, void* recv, size_t count,
                                         hvdrun_dtype dtype, void* cuda_stream);

/** 1 when the collective behind `handle` has finished (successfully or not), 0 while it is
 *  queued or running, -1 for a handle that is unknown or already waited for. */
HVDRUN_C_API int hvdrun_poll(hvdrun_handle handle);
/** Waits for the collective behind `handle` and releases the handle: 0 when it
 *  succeeded, -1 when it failed (hvdrun_last_error says why) or the handle is unknown. */
HVDRUN_C_API int hvdrun_wait(hvdrun_handle handle);
/** Number of submitted collectives not yet waited for (finished or not). */
HVDRUN_C_API long long hvdrun_pending(void);

/** Declares that this rank has no more work and waits until every rank has joined,
 *  standing in meanwhile for the collectives other ranks still submit (an allreduce gets
 *  zeros for SUM and AVERAGE, the op's identity otherwise; a barrier completes; an
 *  allgather or broadcast fails on the ranks that submitted it, as in Horovod). Returns
 *  the rank that joined last (>= 0, the same on every rank), or -1 on failure. */
HVDRUN_C_API int hvdrun_join(void);

/* ---- ABI version 3 ---------------------------------------------------------------- */

/** Collectives of hvdrun_collective; values are stable. */
typedef enum hvdrun_kind {
  HVDRUN_KIND_ALLREDUCE = 0,
  HVDRUN_KIND_BROADCAST = 1,
  HVDRUN_KIND_ALLGATHER = 2,
  HVDRUN_KIND_ALLTOALL = 3,     /**< ABI 4 */
  HVDRUN_KIND_REDUCESCATTER = 4 /**< ABI 4 */
} hvdrun_kind;

/** One collective with everything the ranks agree on before its data moves (kind, type
 *  and count, shape, op, root, scale factors, device). A rank whose description differs
 *  gets the collective failed, on every rank that submitted it, with a message naming
 *  both sides; the job goes on. Zero-initialise, then set what applies. */
typedef struct hvdrun_collective {
  int kind;               /**< hvdrun_kind */
  const void* send;       /**< input (allreduce, allgather) */
  void* recv;             /**< output (in place when == send); broadcast's buffer */
  size_t count;           /**< elements (per rank for allgather) */
  int dtype;              /**< hvdrun_dtype of the elements moved */
  int op;                 /**< hvdrun_op (allreduce) */
  int root;               /**< broadcast root */
  int device;             /**< 1: CUDA device memory through NCCL */
  void* cuda_stream;      /**< device: cudaStream_t to enqueue on (NULL: default) */
  const char* name;       /**< NULL: matched by order among unnamed collectives */
  const long long* shape; /**< the caller's shape (NULL: [count]); copied at submission */
  int ndim;               /**< entries in shape */
  const char* type_name;  /**< the caller's element type ("int8"); NULL: dtype's name */
  double prescale;        /**< input multiplier (allreduce, reducescatter); 0 is taken as 1 */
  double postscale;       /**< result multiplier (allreduce, reducescatter); 0 is taken as 1 */
  /* ABI 4 (a caller compiled for ABI 3 passes the shorter size: these are then zero). */
  const long long* splits;    /**< alltoall: elements to each rank (NULL: count / size) */
  long long* received_splits; /**< alltoall: out, elements from each rank (may be NULL) */
  size_t recv_count;          /**< alltoall: elements recv can hold */
  int process_set;            /**< 0: every rank; else an id from hvdrun_add_process_set */
  /* ABI 7. The library applies prescale and postscale to host buffers with Horovod's
   * arithmetic (docs/runtime.md); a caller compiled for ABI 6 or earlier passes the shorter
   * size and keeps applying them itself (they are then only checked for agreement). */
  int caller_scales; /**< 1: the caller applies prescale and postscale itself, which device
                          buffers need (the library has no device scaling: factors other
                          than 1 on device buffers are refused without it) */
} hvdrun_collective;

/** What hvdrun_submit returns when a collective of the same name is still in flight on
 *  this rank (submitted, handle not yet waited for). */
#define HVDRUN_DUPLICATE_NAME (-2)

/** Leaves the job at once without agreeing with the other ranks, as at process exit
 *  (hvdrun_shutdown agrees first): queued collectives fail and the other ranks see this
 *  rank gone, so a rank that exits with an error is what the launcher reports. */
HVDRUN_C_API int hvdrun_leave(void);

/* ---- ABI version 4 ---------------------------------------------------------------- */

/** What hvdrun_add_process_set returns when a set of those ranks exists already. */
#define HVDRUN_DUPLICATE_SET (-3)

/** Adds a process set of `n` ranks: collectives with that process_set run among its
 *  members only. Collective over every rank of the job (the same ranks, the same order of
 *  calls). Returns its id (> 0, the same on every rank), HVDRUN_DUPLICATE_SET, or -1. */
HVDRUN_C_API int hvdrun_add_process_set(const int* ranks, int n);
/** Removes process set `id` (collective over every rank): 1 when removed, 0 when there
 *  was no such set, -1 on failure. */
HVDRUN_C_API int hvdrun_remove_process_set(int id);
/** Writes up to `cap` ranks of process set `id` (0: every rank), ascending, to `out` and
 *  returns how many it has, or -1 for an unknown set. */
HVDRUN_C_API int hvdrun_process_set_ranks(int id, int* out, int cap);
/** Starts the timeline into `path` on rank 0 (Chrome's trace format, as Horovod's
 *  HOROVOD_TIMELINE); 0 or -1. */
HVDRUN_C_API int hvdrun_start_timeline(const char* path, int mark_cycles);
/** Stops the timeline and completes its file; 0 or -1. */
HVDRUN_C_API int hvdrun_stop_timeline(void);

/** Submits `c` (`size` = sizeof(hvdrun_collective) as the caller compiled it) and returns
 *  its handle (> 0) at once; -1 on failure, HVDRUN_DUPLICATE_NAME for a name in flight,
 *  HVDRUN_INVALID_ARGUMENT (ABI 9) for arguments this rank got wrong. */
HVDRUN_C_API hvdrun_handle hvdrun_submit(const hvdrun_collective* c, size_t size);
/** As hvdrun_submit; `then(arg, sequence)` runs on the library's thread right after the
 *  collective succeeded and before its handle completes (never after a failure), with
 *  the collective's agreed position among unnamed ones (-1 when named). It may submit the
 *  next step of a composite operation (an allgather whose output is sized by the first
 *  step, say), which then follows at the same point of the agreed order on every rank;
 *  name that step after `sequence` (or the first step's name) so it matches everywhere. */
HVDRUN_C_API hvdrun_handle hvdrun_submit_then(const hvdrun_collective* c, size_t size,
                                              void (*then)(void*, long long), void* arg);
/** Runs `c` and returns 0 once it completed (device: once enqueued), -1 on failure,
 *  HVDRUN_DUPLICATE_NAME for a name in flight, HVDRUN_INVALID_ARGUMENT (ABI 9) for
 *  arguments this rank got wrong. */
HVDRUN_C_API int hvdrun_run(const hvdrun_collective* c, size_t size);
/** The position of the unnamed collective behind `handle` among this rank's unnamed
 *  collectives (the same on every rank), -1 when it is named, -2 on failure. */
HVDRUN_C_API long long hvdrun_sequence(hvdrun_handle handle);

/* ---- ABI version 5 ---------------------------------------------------------------- */

/** hvdrun_hosts_updated's bits. */
#define HVDRUN_HOSTS_ADDED 1
#define HVDRUN_HOSTS_REMOVED 2
/** This rank has no place in the next generation (its host left the job): shut down and
 *  end the process with status 0. */
#define HVDRUN_RANK_RETIRED 4

/** In-process elastic recovery (docs/elastic.md): tells this rank's agent that the program
 *  runs under an elastic retry loop (hvd.elastic.run), so that a failure elsewhere may keep
 *  this process. 1 when told; 0 when the rank has no control channel from its agent (the
 *  job then replaces processes); -1 before hvdrun_init or when the agent is gone. */
HVDRUN_C_API int hvdrun_elastic_declare(void);
/** Whether the agent has placed this rank in a next generation it has not joined yet: 0
 *  when not, else the host changes (HVDRUN_HOSTS_ADDED, HVDRUN_HOSTS_REMOVED, or both);
 *  hvdrun_shutdown() then hvdrun_init() joins it, unless HVDRUN_RANK_RETIRED is set too:
 *  then the rank ends instead. Callable at any time. */
HVDRUN_C_API int hvdrun_hosts_updated(void);

/* ---- ABI version 6 ---------------------------------------------------------------- */

/** 1 while this process runs as a job of one because hvdrun started it into a running
 *  elastic job (HVDRUN_JOINING; docs/elastic.md): rank 0 of 1, its collectives its own.
 *  hvdrun_shutdown() then hvdrun_init() joins the job, whose ranks wait for it (Python's
 *  hvd.elastic.run does so before its first sync). 0 otherwise; -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_elastic_joining(void);

/* ---- ABI version 7 ---------------------------------------------------------------- */

/** The rows of this rank's slice when reduce-scatter splits a first dimension of `rows`
 *  among process set `process_set` (0: every rank); ranks below rows % size get one row
 *  more, as in Horovod: what a binding sizes its output by. -1 for an unknown set, one
 *  this rank is not in, or a negative `rows`. (hvdrun_collective.caller_scales is ABI 7
 *  too.) */
HVDRUN_C_API long long hvdrun_reducescatter_rows(long long rows, int process_set);

/* ---- ABI version 8 ---------------------------------------------------------------- */

/** 1 when every host of the job runs the same number of ranks (Horovod's is_homogeneous()),
 *  else 0; every rank has the same answer, agreed when the ranks checked in (for an elastic
 *  job's generation, when it formed). -1 before hvdrun_init. */
HVDRUN_C_API int hvdrun_is_homogeneous(void);

/* ---- ABI version 9 ---------------------------------------------------------------- */

/** What hvdrun_submit, hvdrun_submit_then and hvdrun_run return (-1 before ABI 9) when
 *  this rank's own arguments are wrong, found before any data moved: an unknown element
 *  type, op or process set, a process set this rank is not in, a root outside the set, a
 *  null buffer, splits that do not add up, scale factors on device buffers. The job goes
 *  on: Horovod's invalid argument (ValueError in torch, InvalidArgumentError in
 *  TensorFlow), not its internal error. */
#define HVDRUN_INVALID_ARGUMENT (-4)

/** Message of the last failure on this thread ("" when none). Valid until the next call. */
HVDRUN_C_API const char* hvdrun_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HVDRUN_HVDRUN_C_H_ */
