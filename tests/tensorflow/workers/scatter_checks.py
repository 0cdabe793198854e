"""alltoall, reducescatter, grouped_reducescatter and process sets of hvdrun.tensorflow
against values computed here, eagerly and inside tf.function, with gradients; and many
collectives of every kind in flight at once, their inputs ready in rank-dependent orders.
Imported by ops_worker.py (one job per size, so no extra TensorFlow start-up); run(hvd)
raises AssertionError on the first value that differs."""
import numpy as np
import tensorflow as tf

from _checks import both as _both, check


def _check(got, want, what, tol=1e-6):
    # Averages over 3 ranks (a set of 4 ranks less one) are not exact in float32.
    check(got, want, what, tol)


def _slices(rows, n):
    """Horovod's reducescatter split: ranks below rows % n get one row more."""
    sizes = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
    starts = np.cumsum([0] + sizes)
    return [slice(starts[i], starts[i + 1]) for i in range(n)]


def _alltoall(hvd, me, n, ps, tag):
    """alltoall among `n` ranks (this one the me-th) of process set `ps`: with splits
    (rank k sends k+1 rows to each, rows valued 100*k + destination), and in equal parts,
    for float32, int32, int8 and bool; and its gradient."""
    for dtype in (tf.float32, tf.int32, tf.int8, tf.bool):
        def rows_to(j):
            v = np.full((me + 1, 2), (100 * me + j) % 7 if dtype == tf.int8 else 100 * me + j)
            return (v % 2 == 1) if dtype == tf.bool else v
        x = tf.constant(np.concatenate([rows_to(j) for j in range(n)]), dtype=dtype)
        splits = tf.constant([me + 1] * n, dtype=tf.int32)
        for mode, (out, received) in _both(lambda: hvd.alltoall(x, splits, process_set=ps)):
            want = np.concatenate([np.full((k + 1, 2), (100 * k + me) % 7 if dtype == tf.int8
                                           else 100 * k + me) for k in range(n)])
            if dtype == tf.bool:
                want = want % 2 == 1
            _check(out, want, f"{tag} {mode} alltoall {dtype.name}")
            _check(received, [k + 1 for k in range(n)], f"{tag} {mode} received splits")
    x = tf.constant(np.arange(2 * n, dtype=np.float32)[:, None] + 100 * me)
    for mode, out in _both(lambda: hvd.alltoall(x, process_set=ps)):
        want = np.array([[100 * k + 2 * me + d] for k in range(n) for d in (0, 1)])
        _check(out, want, f"{tag} {mode} alltoall in equal parts")
    # One rank sends nothing (and receives from the others).
    x = tf.ones([0 if me == 0 else n, 3])
    for mode, (out, received) in _both(
            lambda: hvd.alltoall(x, [0 if me == 0 else 1] * n, process_set=ps)):
        _check(out, np.ones((n - 1, 3)), f"{tag} {mode} alltoall, rank 0 sending nothing")
        _check(received, [0] + [1] * (n - 1), f"{tag} {mode} received from rank 0")

    # d/dx sum(c_receiver * alltoall(x)): the rows sent to rank j get j+1.
    v = tf.Variable(tf.ones([n * (me + 1), 2]))

    def grad():
        with tf.GradientTape() as tape:
            out, _ = hvd.alltoall(v, [me + 1] * n, process_set=ps)
            loss = tf.reduce_sum(out * float(me + 1))
        return tape.gradient(loss, v)

    for mode, got in _both(grad):
        want = np.concatenate([np.full((me + 1, 2), j + 1.0) for j in range(n)])
        _check(got, want, f"{tag} {mode} alltoall gradient")


def _reducescatter(hvd, me, n, ps, tag):
    """reducescatter and grouped_reducescatter among `n` ranks of `ps`, even and uneven
    first dimensions, Sum, Average, scale factors; their gradients (Horovod's)."""
    def value(k, shape):
        return (np.arange(int(np.prod(shape))).reshape(shape) % 5 + k + 1).astype(np.float64)

    total = {s: sum(value(k, s) for k in range(n)) for s in [(2 * n, 3), (2 * n + 1, 2)]}
    for shape in total:
        mine = _slices(shape[0], n)[me]
        for dtype in (tf.float32, tf.float64, tf.int32):
            x = tf.constant(value(me, shape), dtype=dtype)
            for mode, got in _both(lambda: hvd.reducescatter(x, op=hvd.Sum, process_set=ps)):
                _check(got, total[shape][mine], f"{tag} {mode} reducescatter {shape} {dtype.name}")
        x = tf.constant(value(me, shape), dtype=tf.float32)
        for mode, got in _both(lambda: hvd.reducescatter(x, process_set=ps)):
            _check(got, total[shape][mine] / n, f"{tag} {mode} reducescatter Average")
        for mode, got in _both(lambda: hvd.reducescatter(
                x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, process_set=ps)):
            _check(got, total[shape][mine] * 1.5, f"{tag} {mode} reducescatter scaled")
        for mode, got in _both(lambda: hvd.reducescatter(
                x, compression=hvd.Compression.fp16, process_set=ps)):
            assert got.dtype == np.float32, got.dtype
            _check(got, total[shape][mine] / n, f"{tag} {mode} reducescatter fp16", 1e-2)
    group = [tf.constant(value(me, s), dtype=tf.float32) for s in total]
    for mode, got in _both(lambda: hvd.grouped_reducescatter(group, op=hvd.Sum,
                                                              process_set=ps)):
        for s, g in zip(total, got):
            _check(g, total[s][_slices(s[0], n)[me]], f"{tag} {mode} grouped_reducescatter {s}")

    # Horovod's gradient: the upstream gradients of every rank gathered, times n for Sum.
    v = tf.Variable(tf.ones([2 * n + 1, 2]))
    for op, factor in ((hvd.Sum, n), (hvd.Average, 1)):
        def grad():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(hvd.reducescatter(v, op=op, process_set=ps) * (me + 1.0))
            return tape.gradient(loss, v)

        def grouped_grad():
            with tf.GradientTape() as tape:
                a, b = hvd.grouped_reducescatter([v, 2 * v], op=op, process_set=ps)
                loss = tf.reduce_sum(a * (me + 1.0)) + tf.reduce_sum(b)
            return tape.gradient(loss, v)

        want = np.concatenate([np.full((s.stop - s.start, 2), (k + 1.0) * factor)
                               for k, s in enumerate(_slices(2 * n + 1, n))])
        for mode, got in _both(grad):
            _check(got, want, f"{tag} {mode} reducescatter gradient op {op}")
        for mode, got in _both(grouped_grad):
            _check(got, want + 2 * factor, f"{tag} {mode} grouped_reducescatter gradient")


def _process_set_collectives(hvd, r, ps, tag):
    """allreduce, grouped_allreduce, allgather, broadcast (root: a rank of the job), objects,
    variables and DistributedGradientTape inside process set `ps`, eager and graph."""
    members = ps.ranks
    me, m = members.index(r), len(members)
    assert ps.included() and ps.size() == m and ps.rank() == me, (tag, ps)
    x = tf.constant([float(r + 1)] * 3)
    want = float(sum(k + 1 for k in members))
    for mode, got in _both(lambda: hvd.allreduce(x, op=hvd.Sum, process_set=ps)):
        _check(got, [want] * 3, f"{tag} {mode} allreduce")
    for mode, got in _both(lambda: hvd.allreduce(x, process_set=ps)):
        _check(got, [want / m] * 3, f"{tag} {mode} allreduce Average")
    for mode, got in _both(lambda: hvd.grouped_allreduce([x, 2 * x, tf.constant([r])],
                                                          op=hvd.Sum, process_set=ps)):
        _check(got[0], [want] * 3, f"{tag} {mode} grouped_allreduce 0")
        _check(got[1], [2 * want] * 3, f"{tag} {mode} grouped_allreduce 1")
        _check(got[2], [sum(members)], f"{tag} {mode} grouped_allreduce int")
    rows = tf.fill([me + 1, 2], float(r))
    for mode, got in _both(lambda: hvd.allgather(rows, process_set=ps)):
        _check(got, np.concatenate([np.full((i + 1, 2), float(k))
                                    for i, k in enumerate(members)]), f"{tag} {mode} allgather")
    root = members[-1]
    for mode, got in _both(lambda: hvd.broadcast(x, root, process_set=ps)):
        _check(got, [root + 1.0] * 3, f"{tag} {mode} broadcast from rank {root}")
    sl = tf.IndexedSlices(tf.constant([[float(r)]]), tf.constant([me]), tf.constant([m, 1]))
    for mode, got in _both(lambda: hvd.allreduce(sl, process_set=ps).values):
        _check(got, [[k / m] for k in members], f"{tag} {mode} IndexedSlices")
    assert hvd.broadcast_object(("from", r), root, process_set=ps) == ("from", root), tag
    assert hvd.allgather_object(r, process_set=ps) == members, tag
    var = tf.Variable([float(r)])
    hvd.broadcast_variables([var], root, process_set=ps)
    _check(var.numpy(), [float(root)], f"{tag} broadcast_variables")

    q = tf.function(lambda: (hvd.size_op(ps.process_set_id),
                             hvd.process_set_included_op(ps.process_set_id)))()
    assert [int(t) for t in q] == [m, 1], (tag, q)

    # Gradients stay in the set: allreduce's, allgather's, broadcast's and the tape's.
    v = tf.Variable([1.0, 1.0])

    def grads():
        with tf.GradientTape() as tape:
            loss = (tf.reduce_sum(hvd.allreduce(v, op=hvd.Sum, process_set=ps) * (r + 1.0))
                    + tf.reduce_sum(hvd.allgather(v, process_set=ps) * (r + 1.0))
                    + tf.reduce_sum(hvd.broadcast(v, root, process_set=ps)))
        return tape.gradient(loss, v)

    for mode, got in _both(grads):
        # allreduce: the sum of the c's; allgather: their average; broadcast: m/m on root.
        want_g = want + want / m + (1.0 if r == root else 0.0)
        _check(got, [want_g] * 2, f"{tag} {mode} gradients in the set")

    def tape():
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(v * (r + 1.0))
        return hvd.DistributedGradientTape(t, process_set=ps).gradient(loss, [v])[0]

    for mode, got in _both(tape):
        _check(got, [want / m] * 2, f"{tag} {mode} DistributedGradientTape")


def _in_flight(hvd, r, n):
    """24 collectives of every kind in one graph, independent of each other, whose inputs
    come ready in opposite orders on even and odd ranks (a loop of rank-dependent length
    before each): TensorFlow submits them in those orders, far past libhvdrun's window of
    8 queued collectives, and every one must still meet its peers."""
    kinds = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "grouped"]
    count = 24

    @tf.function(autograph=False)
    def graph():
        m = tf.eye(16) * 1.0001
        out = []
        for k in range(count):
            trips = tf.constant(150 * (k if r % 2 == 0 else count - 1 - k))
            _, d = tf.while_loop(lambda i, d: i < trips, lambda i, d: (i + 1, d @ m),
                                 (tf.constant(0), tf.eye(16)))
            x = tf.fill([n, 2], float(r + k)) + 0.0 * tf.reduce_sum(d)
            kind = kinds[k % len(kinds)]
            if kind == "allreduce":
                out.append(hvd.allreduce(x, op=hvd.Sum))
            elif kind == "allgather":
                out.append(hvd.allgather(x))
            elif kind == "broadcast":
                out.append(hvd.broadcast(x, k % n))
            elif kind == "alltoall":
                out.append(hvd.alltoall(x))
            elif kind == "reducescatter":
                out.append(hvd.reducescatter(x, op=hvd.Sum))
            else:
                out.append(hvd.grouped_allreduce([x, x[:1]], op=hvd.Sum)[1])
        return out

    for k, got in enumerate(graph()):
        kind = kinds[k % len(kinds)]
        s = sum(q + k for q in range(n))
        want = {"allreduce": np.full((n, 2), s),
                "allgather": np.concatenate([np.full((n, 2), q + k) for q in range(n)]),
                "broadcast": np.full((n, 2), k % n + k),
                "alltoall": np.concatenate([np.full((1, 2), q + k) for q in range(n)]),
                "reducescatter": np.full((1, 2), s),
                "grouped": np.full((1, 2), s)}[kind]
        _check(got.numpy(), want, f"in flight {k} ({kind})")


def run(hvd):
    r, n = hvd.rank(), hvd.size()
    _alltoall(hvd, r, n, hvd.global_process_set, "global")
    _reducescatter(hvd, r, n, hvd.global_process_set, "global")
    _in_flight(hvd, r, n)
    if n == 1:
        return
    # Process sets, given to init() (on every rank, in one order) and added later.
    hvd.shutdown()
    evens, odds = hvd.ProcessSet(range(0, n, 2)), hvd.ProcessSet(range(1, n, 2))
    hvd.init(process_sets=[evens, odds])
    assert evens.process_set_id > 0 and odds.process_set_id > 0
    mine = evens if r % 2 == 0 else odds
    other = odds if r % 2 == 0 else evens
    assert not other.included() and other.rank() == -1
    q = tf.function(lambda: hvd.process_set_included_op(other.process_set_id))()
    assert int(q) == 0, q
    # The other set's collective is this rank's own mistake: InvalidArgumentError, as in
    # Horovod (not FailedPreconditionError, which hvd.elastic would take for a lost peer),
    # eagerly and in a graph; the job goes on.
    for how, call in (("eager", lambda: hvd.allreduce(tf.ones([4]), process_set=other)),
                      ("graph", tf.function(lambda: hvd.allreduce(tf.ones([4]),
                                                                  process_set=other)))):
        try:
            call()
            raise AssertionError(f"{how}: a rank outside {other.ranks} ran its allreduce")
        except tf.errors.InvalidArgumentError as e:
            assert "is not in process set" in str(e), (how, str(e))
    tag = f"set {mine.ranks}"
    _process_set_collectives(hvd, r, mine, tag)
    _alltoall(hvd, mine.ranks.index(r), len(mine.ranks), mine, tag)
    _reducescatter(hvd, mine.ranks.index(r), len(mine.ranks), mine, tag)
    # A set of all but rank 0, added after init (HOROVOD_DYNAMIC_PROCESS_SETS=1); at 2
    # ranks that is `odds`, removed first (a duplicate set is refused).
    if n == 2:
        assert hvd.remove_process_set(odds) and odds.process_set_id is None
    rest = hvd.add_process_set(list(range(1, n)))
    if r > 0:
        _process_set_collectives(hvd, r, rest, f"set {rest.ranks}")
    # Every rank of the job, meanwhile, still meets on the global set.
    _check(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy(), [float(n)], "global after")
    ps_id = rest.process_set_id
    assert hvd.remove_process_set(rest) and rest.process_set_id is None
    q = tf.function(lambda: hvd.process_set_included_op(ps_id))()
    assert int(q) == -3, q
    try:
        hvd.allreduce(tf.constant([1.0]), process_set=rest)
        raise AssertionError("a removed process set was accepted")
    except ValueError as e:
        assert "not registered" in str(e), str(e)
