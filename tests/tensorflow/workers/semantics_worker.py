"""One rank of a job that runs every reduction of the semantics grid (allreduce with Sum,
Average, Min, Max and Product; reducescatter with Sum and Average; each element type; four
pairs of scale factors; the whole job and a process set) through one front end, and writes
each result's bytes to OUT_DIR/<front end>.<rank>.json. The test compares the three front
ends' files bit for bit: the C ABI (ctypes on NumPy buffers), hvdrun.torch and
hvdrun.tensorflow. Every rank starts from the same bits in every front end, and the C ABI
run also checks its results against NumPy (exact for integers, within half precision's
rounding for floating point).

Usage: semantics_worker.py c|torch|tf OUT_DIR"""
import ctypes
import json
import os
import sys

import numpy as np

FRONT, OUT = sys.argv[1], sys.argv[2]
if FRONT == "tf":
    import tensorflow as tf  # before libhvdrun loads (its BoringSSL)

    import hvdrun.tensorflow as hvd
elif FRONT == "torch":
    import torch

    import hvdrun.torch as hvd
else:
    from hvdrun import _lib

OPS = ["sum", "average", "min", "max", "product"]
# (prescale, postscale): exact in float32, so every front end passes the same factor.
SCALES = [(1.0, 1.0), (0.5, 1.0), (1.0, 0.25), (0.5, 3.0)]
DTYPES = ["int32", "int64", "float32", "float64", "float16", "bfloat16", "uint8", "int8",
          "int16"]
# The C ABI reduces libhvdrun's own types; the frameworks widen int8 and int16 to int32.
C_DTYPES = {"int32": 0, "int64": 1, "float32": 2, "float64": 3, "float16": 4, "bfloat16": 5,
            "uint8": 6}
SHAPE = (6, 2)  # reducescatter: two rows for each of three ranks
SET = [0, 2]


def inputs(rank, case, dtype):
    """The input bits of `rank` for case number `case`: small values, exact in every type
    (halves for floating point), as a NumPy array (bfloat16 as its uint16 bits)."""
    i = np.arange(SHAPE[0] * SHAPE[1]).reshape(SHAPE)
    v = (i * 7 + rank * 5 + case) % 9 - 4
    if dtype == "uint8":
        return (v + 4).astype(np.uint8)
    if dtype.startswith("int"):
        return v.astype(dtype)
    f = (v / 2.0).astype(np.float32)
    if dtype == "bfloat16":
        return (f.view(np.uint32) >> 16).astype(np.uint16)
    return f.astype(dtype)


def as_float64(a, dtype):
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def grid(rank, size, set_ranks):
    """(key, kind, op, dtype, pre, post, in_set, case) of every reduction this rank runs."""
    case = 0
    for in_set in (False, True):
        if in_set and rank not in set_ranks:
            continue
        for kind, ops in (("allreduce", OPS), ("reducescatter", ["sum", "average"])):
            for op in ops:
                for dtype in DTYPES:
                    if kind == "reducescatter" and dtype in ("int8", "int16"):
                        continue  # (Horovod's TensorFlow reducescatter takes neither)
                    for pre, post in SCALES:
                        case += 1
                        key = f"{kind}/{op}/{dtype}/{pre}/{post}/{'set' if in_set else 'all'}"
                        yield key, kind, op, dtype, pre, post, in_set, case


def expected(kind, op, dtype, pre, post, ranks, rank, case):
    """The result NumPy computes: prescale, reduce, Average's division, postscale; integers
    truncated toward zero at each step."""
    integer = dtype != "bfloat16" and not dtype.startswith("float")
    xs = [as_float64(inputs(k, case, dtype), dtype) * pre for k in ranks]
    if integer:
        xs = [np.trunc(x) for x in xs]
    red = {"sum": sum(xs), "average": sum(xs), "min": np.minimum.reduce(xs),
           "max": np.maximum.reduce(xs), "product": np.prod(xs, axis=0)}[op]
    if op == "average":
        red = np.trunc(red / len(ranks)) if integer else red / len(ranks)
    red = red * post
    if integer:
        red = np.trunc(red)
    if kind == "reducescatter":
        rows = SHAPE[0] // len(ranks)
        me = ranks.index(rank)
        red = red[me * rows:(me + 1) * rows]
    return red


def run_c(rank, size):
    lib = _lib.lib()
    assert lib.hvdrun_init() == 0, _lib.last_error()
    ids = (ctypes.c_int * len(SET))(*SET)
    set_id = lib.hvdrun_add_process_set(ids, len(SET))
    assert set_id > 0, _lib.last_error()
    results = {}
    for key, kind, op, dtype, pre, post, in_set, case in grid(rank, size, SET):
        if dtype not in C_DTYPES:
            continue
        ranks = SET if in_set else list(range(size))
        x = inputs(rank, case, dtype)
        rows = SHAPE[0] // len(ranks) if kind == "reducescatter" else SHAPE[0]
        out = np.zeros((rows, SHAPE[1]), dtype=x.dtype)
        shape = (ctypes.c_longlong * 2)(*SHAPE)
        c = _lib.Collective()
        c.kind = _lib.KIND_REDUCESCATTER if kind == "reducescatter" else _lib.KIND_ALLREDUCE
        c.send, c.recv, c.count = x.ctypes.data, out.ctypes.data, x.size
        c.dtype, c.op = C_DTYPES[dtype], OPS.index(op)
        c.shape, c.ndim = ctypes.cast(shape, ctypes.POINTER(ctypes.c_longlong)), 2
        c.prescale, c.postscale = pre, post
        c.process_set = set_id if in_set else 0
        assert lib.hvdrun_run(ctypes.byref(c), ctypes.sizeof(c)) == 0, (key, _lib.last_error())
        want = expected(kind, op, dtype, pre, post, ranks, rank, case)
        got = as_float64(out, dtype)
        if dtype in ("float16", "bfloat16", "float32", "float64"):
            assert np.allclose(got, want, rtol=1e-2, atol=1e-2), (key, got, want)
        elif dtype == "uint8":
            assert np.array_equal(got, np.mod(want, 256)), (key, got, want)
        else:
            assert np.array_equal(got, want), (key, got, want)
        results[key] = out.tobytes().hex()
    lib.hvdrun_shutdown()
    return results


def torch_tensor(x, dtype):
    if dtype == "bfloat16":  # (torch has no uint16 to take the bits from)
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def torch_bytes(out, dtype):
    return (out.view(torch.int16) if dtype == "bfloat16" else out).contiguous().numpy().tobytes()


def tf_tensor(x, dtype):
    return tf.bitcast(tf.constant(x), tf.bfloat16) if dtype == "bfloat16" else tf.constant(x)


def tf_bytes(out, dtype):
    return (tf.bitcast(out, tf.uint16) if dtype == "bfloat16" else out).numpy().tobytes()


def run_framework(rank, size, tensor, to_bytes):
    """The grid through hvd (hvdrun.torch or hvdrun.tensorflow): `tensor` makes the
    framework's tensor of the input bits, `to_bytes` takes the result's bits back."""
    hvd.init()
    ps = hvd.add_process_set(SET)
    ops = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
           "product": hvd.Product}
    results = {}
    for key, kind, op, dtype, pre, post, in_set, case in grid(rank, size, SET):
        t = tensor(inputs(rank, case, dtype), dtype)
        kw = dict(op=ops[op], prescale_factor=pre, postscale_factor=post,
                  process_set=ps if in_set else hvd.global_process_set)
        out = hvd.reducescatter(t, **kw) if kind == "reducescatter" else hvd.allreduce(t, **kw)
        results[key] = to_bytes(out, dtype).hex()
    hvd.shutdown()
    return results


def main():
    rank, size = int(os.environ["HVDRUN_RANK"]), int(os.environ["HVDRUN_SIZE"])
    assert size == 3, "the grid's process set and reducescatter rows are for 3 ranks"
    if FRONT == "c":
        results = run_c(rank, size)
    elif FRONT == "torch":
        results = run_framework(rank, size, torch_tensor, torch_bytes)
    else:
        results = run_framework(rank, size, tf_tensor, tf_bytes)
    with open(os.path.join(OUT, f"{FRONT}.{rank}.json"), "w") as f:
        json.dump(results, f, sort_keys=True)
    print(f"semantics grid of {len(results)} reductions done ({FRONT})")


main()
