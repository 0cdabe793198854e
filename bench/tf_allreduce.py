"""One side of bench/tf_allreduce.sh: float32 Sum allreduce from TensorFlow, started by
hvdrun, timed in one of three ways:
  graph           hvdrun.tensorflow's hvd.allreduce inside a tf.function (its op library)
  eager           the same op called eagerly
  numpy_function  the alternative design: tf.numpy_function in a tf.function calling
                  libhvdrun's hvdrun_run through ctypes (a fresh output array per call)
Each timed call is one tf.function call (or eager op) doing CALLS_PER_STEP allreduces in
sequence (each on the previous result), so the tf.function call overhead is spread as in a
training step. Rank 0 prints "result impl=… bytes=… us=…" per size: microseconds per
allreduce, the median of 5 batches of about 0.2 s after a warm-up.
Usage: hvdrun -np N python bench/tf_allreduce.py graph|eager|numpy_function BYTES...
"""
import ctypes
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd
from hvdrun import _lib

CALLS_PER_STEP = 8


def numpy_function_allreduce():
    lib = _lib.lib()
    c = _lib.Collective()
    ref, nbytes = ctypes.byref(c), ctypes.sizeof(c)

    def reduce(x):
        out = np.empty_like(x)
        c.kind, c.dtype, c.op = _lib.KIND_ALLREDUCE, _lib.FLOAT32, _lib.SUM
        c.send, c.recv, c.count = x.ctypes.data, out.ctypes.data, x.size
        if lib.hvdrun_run(ref, nbytes) != 0:
            raise RuntimeError(_lib.last_error())
        return out

    return lambda t: tf.numpy_function(reduce, [t], tf.float32, stateful=True)


def main():
    impl, sizes = sys.argv[1], [int(a) for a in sys.argv[2:]]
    hvd.init()
    if impl in ("graph", "eager"):
        def one(t):
            return hvd.allreduce(t, op=hvd.Sum)
    elif impl == "numpy_function":
        one = numpy_function_allreduce()
    else:
        sys.exit(f"tf_allreduce.py: unknown implementation {impl!r}")

    def step(t):
        for _ in range(CALLS_PER_STEP):
            t = one(t) * 0.5  # keeps values bounded; a small elementwise op per call
        return t

    if impl != "eager":
        step = tf.function(step, autograph=False)
    for nbytes in sizes:
        t = tf.ones([max(nbytes // 4, 1)], tf.float32)
        for _ in range(3):
            step(t).numpy()
        t0 = time.perf_counter()
        step(t).numpy()
        once = time.perf_counter() - t0
        reps = max(3, min(5000, int(0.2 / max(once, 1e-7))))
        reps = int(hvd.allreduce(tf.constant(float(reps)), op=hvd.Max).numpy())
        times = []
        for _ in range(5):
            hvd.allreduce(tf.constant(0.0), op=hvd.Sum).numpy()  # a barrier
            t0 = time.perf_counter()
            for _ in range(reps):
                out = step(t)
            out.numpy()
            times.append((time.perf_counter() - t0) / reps / CALLS_PER_STEP)
        if hvd.rank() == 0:
            us = statistics.median(times) * 1e6
            print(f"result impl={impl} bytes={nbytes} us={us:.2f}", flush=True)


if __name__ == "__main__":
    main()
