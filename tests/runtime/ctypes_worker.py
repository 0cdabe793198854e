#!/usr/bin/env python3
"""One rank of a job, driving libhvdrun.so through ctypes only (as a Python program
without any binding package would). Exits 0 when every check holds."""
import ctypes
import os
import sys

lib = ctypes.CDLL(os.environ.get("HVDRUN_LIB", "libhvdrun.so"))
lib.hvdrun_last_error.restype = ctypes.c_char_p
lib.hvdrun_allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int, ctypes.c_int]
lib.hvdrun_broadcast.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
lib.hvdrun_allgather.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_int]
HVDRUN_INT32, HVDRUN_INT64, HVDRUN_FLOAT32, HVDRUN_FLOAT64 = 0, 1, 2, 3
HVDRUN_SUM, HVDRUN_AVERAGE, HVDRUN_MIN, HVDRUN_MAX, HVDRUN_PRODUCT = 0, 1, 2, 3, 4


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: {lib.hvdrun_last_error().decode()}")


# Before init: an error, with a message.
if lib.hvdrun_rank() != -1 or b"before" not in lib.hvdrun_last_error():
    sys.exit("hvdrun_rank before init should fail with a message")

check(lib.hvdrun_init(), "hvdrun_init")
rank, size = lib.hvdrun_rank(), lib.hvdrun_size()
assert 0 <= rank < size, (rank, size)
assert lib.hvdrun_local_size() == size

n = 1000
buf = (ctypes.c_float * n)(*[float(rank + i) for i in range(n)])
check(lib.hvdrun_allreduce(buf, buf, n, HVDRUN_FLOAT32, HVDRUN_SUM), "allreduce")
total = sum(range(size))
for i in range(n):
    assert buf[i] == total + size * i, (i, buf[i])

src = (ctypes.c_double * 4)(rank, rank, rank, rank)
dst = (ctypes.c_double * 4)()
check(lib.hvdrun_allreduce(src, dst, 4, HVDRUN_FLOAT64, HVDRUN_MAX), "allreduce max")
assert list(dst) == [size - 1] * 4 and list(src) == [rank] * 4

b = (ctypes.c_int64 * 3)(*([7, 8, 9] if rank == 0 else [0, 0, 0]))
check(lib.hvdrun_broadcast(b, 3, HVDRUN_INT64, 0), "broadcast")
assert list(b) == [7, 8, 9]

mine = (ctypes.c_int32 * 2)(rank, -rank)
everyone = (ctypes.c_int32 * (2 * size))()
check(lib.hvdrun_allgather(mine, everyone, 2, HVDRUN_INT32), "allgather")
assert list(everyone) == [v for r in range(size) for v in (r, -r)]

# A bad argument is an error code and a message, not a crash.
if lib.hvdrun_broadcast(b, 3, HVDRUN_INT64, size + 5) == 0:
    sys.exit("broadcast from a non-existent root should fail")
assert b"root" in lib.hvdrun_last_error()

check(lib.hvdrun_barrier(), "barrier")
check(lib.hvdrun_shutdown(), "shutdown")
print(f"rank {rank}: ctypes checks passed")
