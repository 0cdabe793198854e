"""One rank of a job checking every hvdrun.tensorflow collective against values computed
here with NumPy, eagerly and inside tf.function, with their gradients (alltoall,
reducescatter and process sets in scatter_checks.py). TensorFlow is
imported before hvdrun loads libhvdrun (its BoringSSL must not take over libhvdrun's
crypto). Prints "tf ops checks passed" when all held."""
import numpy as np
import tensorflow as tf

import hvdrun.tensorflow as hvd
from _checks import both, check

# Enough threads that the graph below runs its 20 loops side by side.
tf.config.threading.set_inter_op_parallelism_threads(24)
hvd.init()
r, n = hvd.rank(), hvd.size()
assert 0 <= r < n and hvd.local_size() == n and hvd.cross_size() == 1
assert hvd.local_rank() == r and hvd.cross_rank() == 0 and hvd.is_initialized()


def value(rank, shape, dtype):
    """Rank `rank`'s test tensor: small integers, so every op is exact in every type."""
    v = (np.arange(int(np.prod(shape))).reshape(shape) % 5 + rank + 1).astype(np.float64)
    return v.astype(dtype.as_numpy_dtype)


def expected(op, shape, dtype):
    vs = np.stack([value(k, shape, dtype).astype(np.float64) for k in range(n)])
    out = {hvd.Sum: vs.sum(0), hvd.Average: vs.sum(0) / n, hvd.Min: vs.min(0),
           hvd.Max: vs.max(0), hvd.Product: vs.prod(0)}[op]
    if dtype.is_integer:
        out = np.trunc(out)
    return out


# ---- allreduce: every op and type, scale factors, compression -------------------------
OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
for dtype in [tf.float32, tf.float64, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.uint8,
              tf.int8, tf.int16]:
    shape = (3, 4)
    x = tf.constant(value(r, shape, dtype))
    ops = OPS if dtype not in (tf.uint8, tf.int8, tf.int16) else [hvd.Sum, hvd.Min, hvd.Max]
    for op in ops:
        if op == hvd.Average and dtype.is_integer:
            continue  # integer Average truncates per element: checked with Sum instead
        tol = 1e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6
        for mode, got in both(lambda: hvd.allreduce(x, op=op)):
            check(got, expected(op, shape, dtype), f"{mode} allreduce {dtype.name} {op}", tol)

x = tf.constant(value(r, (5,), tf.float32))
for mode, got in both(lambda: hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5,
                                             postscale_factor=3.0)):
    check(got, expected(hvd.Sum, (5,), tf.float32) * 1.5, f"{mode} pre/postscale")
for mode, got in both(lambda: hvd.allreduce(tf.constant([7, 9], tf.int32), op=hvd.Sum,
                                             prescale_factor=0.5)):
    check(got, [3 * n, 4 * n], f"{mode} int prescale truncates")
for mode, got in both(lambda: hvd.allreduce(x, compression=hvd.Compression.fp16)):
    assert got.dtype == np.float32
    check(got, expected(hvd.Average, (5,), tf.float32), f"{mode} fp16 compression", 1e-2)
for mode, got in both(lambda: hvd.allreduce(x, average=False)):
    check(got, expected(hvd.Sum, (5,), tf.float32), f"{mode} average=False")

# ---- IndexedSlices: gathered as Horovod does -------------------------------------------
sl = tf.IndexedSlices(tf.constant([[float(r)] * 2]), tf.constant([r]), tf.constant([n, 2]))
for mode, got in both(lambda: (lambda s: (s.values, s.indices))(hvd.allreduce(sl))):
    vals, idx = got
    check(vals, [[k / n] * 2 for k in range(n)], f"{mode} IndexedSlices values")
    check(idx, list(range(n)), f"{mode} IndexedSlices indices")

# ---- grouped allreduce: mixed shapes and types, fused ----------------------------------
group = [tf.constant(value(r, s, d)) for s, d in
         [((2, 3), tf.float32), ((7,), tf.float32), ((1,), tf.int32), ((4, 1), tf.float64),
          ((), tf.float32)]]
for mode, got in both(lambda: hvd.grouped_allreduce(group, op=hvd.Sum)):
    for t, g in zip(group, got):
        check(g, expected(hvd.Sum, tuple(t.shape), t.dtype), f"{mode} grouped {t.dtype.name}")
# A fusion threshold of 0 reduces each tensor alone: same results.
import os  # noqa: E402
os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"
for mode, got in both(lambda: hvd.grouped_allreduce(group[:2], op=hvd.Max)):
    for t, g in zip(group, got):
        check(g, expected(hvd.Max, tuple(t.shape), t.dtype), f"{mode} unfused grouped")
del os.environ["HOROVOD_FUSION_THRESHOLD"]

# ---- allgather: first dimensions that differ, any type ---------------------------------
for dtype in [tf.float32, tf.int64, tf.bool, tf.int8, tf.float16]:
    rows = tf.cast(tf.fill([r + 1, 2], r % 2 if dtype == tf.bool else r), dtype)
    for mode, got in both(lambda: hvd.allgather(rows)):
        want = np.concatenate([np.full((k + 1, 2), k % 2 if dtype == tf.bool else k)
                               for k in range(n)])
        check(got, want, f"{mode} allgather {dtype.name}")
empty = tf.zeros([0 if r == 0 else 2, 3])
for mode, got in both(lambda: hvd.allgather(empty)):
    check(got, np.zeros((2 * (n - 1), 3)), f"{mode} allgather with an empty rank")
for mode, got in both(lambda: hvd.grouped_allgather([tf.fill([1], r), tf.fill([2], 2 * r)])):
    check(got[0], list(range(n)), f"{mode} grouped_allgather 0")
    check(got[1], [2 * k for k in range(n) for _ in range(2)], f"{mode} grouped_allgather 1")

# ---- broadcast: from every root, any type ----------------------------------------------
for root in range(n):
    for dtype in [tf.float32, tf.bool, tf.int8, tf.complex64]:
        t = tf.cast(tf.fill([2, 2], r + 1), dtype) if dtype != tf.bool else \
            tf.fill([2, 2], r == root)
        for mode, got in both(lambda: hvd.broadcast(t, root)):
            want = np.full((2, 2), True if dtype == tf.bool else root + 1)
            check(got.real if dtype == tf.complex64 else got, want,
                  f"{mode} broadcast {dtype.name} from {root}")

v = tf.Variable(tf.fill([3], float(r)))
w = tf.Variable(tf.fill([2, 2], r))
hvd.broadcast_variables([v, w], root_rank=n - 1)
check(v.numpy(), [n - 1.0] * 3, "broadcast_variables float")
check(w.numpy(), np.full((2, 2), n - 1), "broadcast_variables int")
obj = hvd.broadcast_object({"rank": r, "f": (lambda a: a + 1) if r == 0 else None}, 0)
assert obj["rank"] == 0 and obj["f"](1) == 2, obj
assert hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)]
assert hvd.broadcast_object(None, 0) is None

# ---- gradients ---------------------------------------------------------------------------
x = tf.Variable(tf.fill([3], 1.0))
c = tf.constant([float(r + 1)] * 3)


def grads(fn):
    def g():
        with tf.GradientTape() as tape:
            loss = fn()
        return tape.gradient(loss, x)
    return both(g)


# d/dx sum(c * allreduce_sum(x)) = allreduce_sum(c)
for mode, got in grads(lambda: tf.reduce_sum(c * hvd.allreduce(x, op=hvd.Sum))):
    check(got, [n * (n + 1) / 2] * 3, f"{mode} allreduce gradient")
for mode, got in grads(lambda: tf.reduce_sum(c * hvd.grouped_allreduce([x, 2 * x],
                                                                         op=hvd.Sum)[1])):
    check(got, [n * (n + 1)] * 3, f"{mode} grouped_allreduce gradient")
# allgather: this rank's rows of the averaged upstream gradient
xs = tf.Variable(tf.ones([r + 1, 2]))
weights = tf.concat([tf.fill([k + 1, 2], float(k + 1)) for k in range(n)], 0) * float(r + 1)


def allgather_grad():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(weights * hvd.allgather(xs))
    return tape.gradient(loss, xs)


for mode, got in both(allgather_grad):
    check(got, np.full((r + 1, 2), (r + 1) * (n + 1) / 2), f"{mode} allgather gradient")
# broadcast: the root gets the averaged gradient, the others zero
for mode, got in grads(lambda: tf.reduce_sum(c * hvd.broadcast(x, 0))):
    check(got, [(n + 1) / 2 if r == 0 else 0.0] * 3, f"{mode} broadcast gradient")

# DistributedGradientTape, eager and in tf.function; a local source keeps its own (scaled)
a = tf.Variable([1.0, 2.0])
b = tf.Variable([3.0])


def tape_grads():
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a * float(r + 1)) + tf.reduce_sum(b * float(r + 1))
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(b)
    return tape.gradient(loss, [a, b])


for mode, got in both(tape_grads):
    check(got[0], [(n + 1) / 2] * 2, f"{mode} DistributedGradientTape")
    check(got[1], [(r + 1) / n], f"{mode} DistributedGradientTape local source")


def sparse_tape():
    emb = tf.Variable(tf.ones([n + 1, 2]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(emb, [r]) * float(r + 1))
    return tf.convert_to_tensor(hvd.DistributedGradientTape(tape).gradient(loss, emb))


got = sparse_tape().numpy()
check(got, [[(k + 1) / n] * 2 for k in range(n)] + [[0.0, 0.0]], "sparse gradient gathered")

# ---- queries as ops, names in any order, mismatches, join ---------------------------------
q = tf.function(lambda: (hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(),
                         hvd.local_size_op()))()
assert [int(t) for t in q] == [r, n, r, n], q


@tf.function
def named_in_rank_order():
    # Ranks build the two collectives in opposite orders; names match them.
    value = {"a": 1.0, "b": 10.0}
    out = {}
    for name in ("a", "b") if r % 2 == 0 else ("b", "a"):
        out[name] = hvd.allreduce(tf.constant([value[name]]), op=hvd.Sum, name=name)
    return out["a"], out["b"]


got = named_in_rank_order()
check(got[0], [float(n)], "named a")
check(got[1], [10.0 * n], "named b")



@tf.function
def many_independent():
    # More independent collectives than libhvdrun's negotiation window (8), whose inputs
    # are ready in opposite orders on even and odd ranks (a chain of matrix products of
    # rank-dependent length before each): TensorFlow submits them in those orders, and
    # they must meet all the same. The graph is the same on every rank (collectives are
    # named after their inputs); only the loops' trip counts differ.
    m = tf.eye(32) * 1.0001
    out = []
    for k in range(20):
        trips = tf.constant(200 * (k if r % 2 == 0 else 19 - k))
        _, d = tf.while_loop(lambda i, d: i < trips, lambda i, d: (i + 1, d @ m),
                             (tf.constant(0), tf.eye(32)))
        x = tf.fill([k + 1], float(r + k)) + 0.0 * tf.reduce_sum(d)
        out.append(hvd.allreduce(x, op=hvd.Sum))
    return out


for k, got in enumerate(many_independent()):
    check(got.numpy(), [n * k + n * (n - 1) / 2] * (k + 1), f"independent allreduce {k}")

if n > 1:
    try:
        hvd.allreduce(tf.ones([r + 1]))
        raise AssertionError("a shape mismatch did not raise")
    except tf.errors.FailedPreconditionError as e:
        assert "rank 0 has float32[1], rank 1 has float32[2]" in str(e), str(e)
    check(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(), [n, n], "after a mismatch")

last = hvd.join()
assert int(last) in range(n), last
hvd.shutdown()
assert not hvd.is_initialized()
hvd.init()  # again, as Horovod's test suite does between tests
check(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy(), [float(n)], "after re-init")

# alltoall, reducescatter, process sets; every kind of collective in flight at once.
import scatter_checks  # noqa: E402 (workers/scatter_checks.py, beside this file)
scatter_checks.run(hvd)
print(f"rank {r}: tf ops checks passed", flush=True)
