"""Horovod's TensorFlow collectives (`horovod.tensorflow.mpi_ops`) as TensorFlow ops.

The ops are asynchronous kernels in hvdrun's op library (ops.cc, built against the
installed TensorFlow on first use by hvdrun._tf_build) that submit to libhvdrun's C ABI;
they run eagerly and inside tf.function graphs. The library is bound to the libhvdrun
that hvdrun._lib loaded, so the job init() joins is the one the ops use.

Matching across ranks: eager collectives meet by their order (or by name= when given);
inside a graph every collective is named after its input tensor as Horovod names it
(`HorovodAllreduce_<tensor>` becomes `HvdrunAllreduce_<tensor>`, made unique in the
graph). TensorFlow may run a graph's independent ops in any order, and libhvdrun agrees
on the first 8 collectives each rank has queued at a time: two ranks that queued 8
different ones first would wait for each other for ever. So a graph's collectives without
a name= of the caller's run in the order the program built them (each after the one
built before it, through a control dependency), the same order on every rank. Those the
program names itself are left free, so named collectives still meet in any order, as in
Horovod. Fusing (grouped_allreduce, DistributedGradientTape, DistributedOptimizer) keeps
the count of such collectives small.
"""
import ctypes
import re
import threading

import tensorflow as tf
from tensorflow.python.framework import ops as _framework_ops

from hvdrun import _job, _lib
from hvdrun._job import (Average, Max, Min, Product, Sum, ccl_built, ddl_built,  # noqa: F401
                         global_process_set, gloo_built, gloo_enabled, is_homogeneous,
                         mpi_built, mpi_enabled, rocm_built)
from hvdrun._lib import HvdrunError
from hvdrun._tf_build import library as _library_path
from hvdrun.tensorflow.util import _executing_eagerly

_WHAT = "hvdrun.tensorflow"

# Horovod's name for a failed collective raised from Python; inside TensorFlow a failed
# collective raises tf.errors.FailedPreconditionError, as Horovod's ops do.
HorovodInternalError = HvdrunError

_C_OP = {Average: _lib.AVERAGE, Sum: _lib.SUM, Min: _lib.MIN, Max: _lib.MAX,
         Product: _lib.PRODUCT}
_FROM_C_OP = {v: k for k, v in _C_OP.items()}

# ---- the op library --------------------------------------------------------------------

_load_lock = threading.Lock()
_ops = None


def _bind(path):
    lib = _lib.lib()
    names = ("hvdrun_submit_then", "hvdrun_wait", "hvdrun_poll", "hvdrun_last_error",
             "hvdrun_rank", "hvdrun_size", "hvdrun_local_rank", "hvdrun_local_size",
             "hvdrun_cross_rank", "hvdrun_cross_size")
    fns = (ctypes.c_void_p * len(names))(
        *[ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names])
    bind = ctypes.CDLL(path).hvdrun_tf_bind
    bind.restype = ctypes.c_int
    bind.argtypes = [ctypes.c_void_p, ctypes.c_int]
    if bind(fns, len(names)) != 0:
        raise HvdrunError(f"{_WHAT}: {path} does not match this hvdrun package; delete it "
                          "(it is rebuilt on next use)")


def _lib_ops():
    """The generated op wrappers (loading, and on first use building, the library)."""
    global _ops
    if _ops is None:
        with _load_lock:
            if _ops is None:
                path = _library_path()
                module = tf.load_op_library(path)
                _bind(path)
                _ops = module
    return _ops


# ---- the job ---------------------------------------------------------------------------

def init(comm=None, process_sets=None):
    """Joins the job that `hvdrun` started (reads the HVDRUN_* environment, meets the
    other ranks, builds the communicators) and loads the TensorFlow ops. Idempotent.

    Arguments:
        comm: Horovod's MPI communicator or list of ranks; not supported (must be None).
        process_sets: Horovod's process sets; not supported (must be None).
    """
    _job.init(_WHAT, comm, process_sets)
    _lib_ops()


def shutdown():
    """Leaves the job (agreed with the other ranks) and releases the communicators."""
    _job.shutdown(_WHAT)


def is_initialized():
    """True between init() and shutdown()."""
    return _job.is_initialized()


def rank():
    """This process's rank in [0, size())."""
    return _job.query(_WHAT, "rank")


def size():
    """Number of ranks in the job."""
    return _job.query(_WHAT, "size")


def local_rank():
    """Rank among the ranks on this host (use it to pick a GPU)."""
    return _job.query(_WHAT, "local_rank")


def local_size():
    """Number of ranks on this host."""
    return _job.query(_WHAT, "local_size")


def cross_rank():
    """Index of this host among the hosts."""
    return _job.query(_WHAT, "cross_rank")


def cross_size():
    """Number of hosts with a rank of this local_rank."""
    return _job.query(_WHAT, "cross_size")


def mpi_threads_supported():
    """Horovod raises when MPI is not in use; so does hvdrun, which never uses MPI."""
    raise ValueError(f"{_WHAT}.mpi_threads_supported: hvdrun does not use MPI")


def nccl_built():
    """False: the TensorFlow ops run on host memory (TensorFlow copies GPU tensors)."""
    return False


def cuda_built():
    """False: the TensorFlow ops have CPU kernels only."""
    return False


def _check_process_set(process_set, what):
    _job.check_process_set(process_set, f"{_WHAT}.{what}")


def handle_average_backwards_compatibility(op, average):
    """Horovod's resolution of the deprecated `average` flag against `op`: Average by
    default, Sum for average=False; giving both raises."""
    return _job.resolve_op(op, average, _WHAT)


# ---- names -----------------------------------------------------------------------------

def _normalize_name(name):
    """A tensor name as an op name (Horovod's rule)."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _collective_name(kind, tensor_names, name, ignore_name_scope):
    """What the ranks match this collective by: in eager mode `name` or '' (by order); in a
    graph `name` or Hvdrun<kind>_<tensor>, made unique in the graph and under its name
    scope unless ignore_name_scope."""
    if _executing_eagerly():
        return name or ""
    if name is None:
        name = _normalize_name(f"Hvdrun{kind}_" + "_".join(tensor_names))
    _check_not_xla()
    full = tf.compat.v1.get_default_graph().unique_name(name)
    return full.rsplit("/", 1)[-1] if ignore_name_scope else full


def _in_build_order(create, named):
    """Runs create() (which builds one collective op) after the previous unnamed
    collective built in this graph; eagerly, or for a `named` one, just runs it."""
    if named or _executing_eagerly():
        return create()
    graph = tf.compat.v1.get_default_graph()
    last = getattr(graph, "_hvdrun_last_collective", None)
    if last is None:
        out = create()
    else:
        with tf.control_dependencies([last]):
            out = create()
    graph._hvdrun_last_collective = (out[0] if isinstance(out, (list, tuple)) else out).op
    return out


def _check_not_xla():
    from tensorflow.python.ops import control_flow_util
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise NotImplementedError(
            f"{_WHAT}: collectives cannot be compiled by XLA (tf.function(jit_compile=True), "
            "Keras' jit_compile); use jit_compile=False for the function or model.compile()")


# ---- collectives -----------------------------------------------------------------------

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """The raw allreduce op of `tensor` (dense) with Horovod's `op` (Sum by default, as
    Horovod's _allreduce)."""
    _check_process_set(process_set, "allreduce")
    tensor = tf.convert_to_tensor(tensor)
    return _in_build_order(lambda: _lib_ops().hvdrun_allreduce(
        tensor, reduce_op=_C_OP[op], prescale_factor=prescale_factor,
        postscale_factor=postscale_factor,
        tensor_name=_collective_name("Allreduce", [tensor.name] if not _executing_eagerly()
                                     else [], name, ignore_name_scope)), name is not None)


@_framework_ops.RegisterGradient("HvdrunAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the allreduce of the gradient (Horovod's)."""
    return _allreduce(grad, op=_FROM_C_OP[op.get_attr("reduce_op")],
                      prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"))


_REDUCIBLE_GROUPED = {tf.uint8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
                      tf.float64}


def _fusion_bytes():
    import os
    v = os.environ.get("HOROVOD_FUSION_THRESHOLD")
    try:
        return max(int(v), 0) if v else 16 << 20
    except ValueError:
        raise ValueError(f"HOROVOD_FUSION_THRESHOLD={v!r} is not a number of bytes") from None


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """Reduces every tensor of the list: those of one element type are fused into buffers
    of at most HOROVOD_FUSION_THRESHOLD bytes (16 MiB by default) and reduced together;
    the results are the same as reducing each alone."""
    _check_process_set(process_set, "grouped_allreduce")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    out = [None] * len(tensors)
    by_type = {}
    for i, t in enumerate(tensors):
        by_type.setdefault(t.dtype, []).append(i)
    for dtype, idx in by_type.items():
        members = [tensors[i] for i in idx]
        if dtype not in _REDUCIBLE_GROUPED or len(members) == 1:
            results = [_allreduce(t, None if name is None else f"{name}.{dtype.name}.{k}", op,
                                  prescale_factor, postscale_factor, ignore_name_scope)
                       for k, t in enumerate(members)]
        else:
            names = [] if _executing_eagerly() else [members[0].name, members[-1].name]
            tag = None if name is None else f"{name}.{dtype.name}"
            results = _in_build_order(lambda: _lib_ops().hvdrun_grouped_allreduce(
                members, reduce_op=_C_OP[op], prescale_factor=prescale_factor,
                postscale_factor=postscale_factor, fusion_bytes=_fusion_bytes(),
                tensor_name=_collective_name("GroupedAllreduce", names, tag,
                                             ignore_name_scope)), tag is not None)
        for i, r in zip(idx, results):
            out[i] = r
    return out


@_framework_ops.RegisterGradient("HvdrunGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=_FROM_C_OP[op.get_attr("reduce_op")],
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension, in rank order. The
    first dimension may differ between ranks; the others may not. Differentiable."""
    _check_process_set(process_set, "allgather")
    tensor = tf.convert_to_tensor(tensor)
    return _in_build_order(lambda: _lib_ops().hvdrun_allgather(
        tensor, tensor_name=_collective_name(
            "Allgather", [tensor.name] if not _executing_eagerly() else [], name,
            ignore_name_scope)), name is not None)


@_framework_ops.RegisterGradient("HvdrunAllgather")
def _allgather_grad(op, grad):
    """Horovod's: the gradient averaged over the ranks, then this rank's rows of it."""
    grad = _allreduce(grad, op=Average)
    with tf.device("/cpu:0"):
        d = tf.reshape(tf.shape(op.inputs[0])[0], [1])
        d = tf.reshape(allgather(d), [size()])
    return tf.split(grad, num_or_size_splits=d, axis=0)[rank()]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """allgather of each tensor of a list; returns the list of results."""
    return [allgather(t, None if name is None else f"{name}.{i}", ignore_name_scope,
                      process_set) for i, t in enumerate(tensors)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Rank `root_rank`'s `tensor` on every rank (any element type, bit for bit).
    Differentiable as Horovod's: the root gets the averaged gradient, the others zero."""
    _check_process_set(process_set, "broadcast")
    tensor = tf.convert_to_tensor(tensor)
    return _in_build_order(lambda: _lib_ops().hvdrun_broadcast(
        tensor, root_rank=root_rank, tensor_name=_collective_name(
            "Broadcast", [tensor.name] if not _executing_eagerly() else [], name,
            ignore_name_scope)), name is not None)


@_framework_ops.RegisterGradient("HvdrunBroadcast")
def _broadcast_grad(op, grad):
    reduced = _allreduce(grad, op=Average)
    if rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites `variables` on every rank with rank `root_rank`'s values; returns the
    new values."""
    _check_process_set(process_set, "broadcast_")
    return [v.assign(broadcast(v, root_rank, None if name is None else f"{name}.{i}"))
            for i, v in enumerate(variables)]


def join():
    """Declares that this rank has no more work and waits until every rank has joined;
    returns the rank that joined last (the same on every rank) as an int32 tensor.
    Meanwhile this rank stands in for the allreduces other ranks still submit (zeros for
    Sum and Average, the identity of Min, Max and Product)."""
    def run():
        r = _lib.lib().hvdrun_join()
        if r < 0:
            raise HorovodInternalError(f"{_WHAT}.join: {_lib.last_error()}")
        return r

    if _executing_eagerly():
        return tf.constant(run(), dtype=tf.int32)
    return tf.numpy_function(lambda: __import__("numpy").int32(run()), [], tf.int32,
                             stateful=True)


def _query_op(which, name):
    return _lib_ops().hvdrun_query(which=which, name=name)


def size_op(process_set_id=0, name=None):
    """size() as an op, read when the graph runs."""
    if process_set_id != 0:
        raise NotImplementedError(f"{_WHAT}.size_op: process sets are not supported")
    return _query_op(1, name)


def local_size_op(name=None):
    """local_size() as an op, read when the graph runs."""
    return _query_op(3, name)


def rank_op(name=None):
    """rank() as an op, read when the graph runs."""
    return _query_op(0, name)


def local_rank_op(name=None):
    """local_rank() as an op, read when the graph runs."""
    return _query_op(2, name)


def process_set_included_op(process_set_id=0, name=None):
    """1 (this rank is in the global set), as an op."""
    if process_set_id != 0:
        raise NotImplementedError(f"{_WHAT}.process_set_included_op: process sets are not "
                                  "supported")
    return tf.constant(1, dtype=tf.int32, name=name)


_framework_ops.NotDifferentiable("HvdrunQuery")
