"""Horovod's TensorFlow collectives (`horovod.tensorflow.mpi_ops`) as TensorFlow ops.

The ops are asynchronous kernels in hvdrun's op library (ops.cc, built against the
installed TensorFlow on first use by hvdrun._tf_build) that submit to libhvdrun's C ABI;
they run eagerly and inside tf.function graphs. The library is bound to the libhvdrun
that hvdrun._lib loaded, so the job init() joins is the one the ops use.

Matching across ranks: eager collectives meet by their order (or by name= when given);
inside a graph every collective is named after its input tensor as Horovod names it
(`HorovodAllreduce_<tensor>` becomes `HvdrunAllreduce_<tensor>`, made unique in the
graph). TensorFlow runs a graph's independent ops in whatever order their inputs come
ready, which differs between ranks; libhvdrun's negotiation meets collectives submitted
in any order, so nothing here orders them.
"""
import ctypes
import re
import threading

import tensorflow as tf
from tensorflow.python.framework import ops as _framework_ops

from hvdrun import _job, _lib
from hvdrun._job import (Average, Max, Min, ProcessSet, Product, Sum,  # noqa: F401
                         add_process_set, ccl_built, ddl_built, global_process_set, gloo_built,
                         gloo_enabled, is_homogeneous, mpi_built, mpi_enabled,
                         remove_process_set, rocm_built)
# HorovodInternalError: a failed collective raised from Python; inside TensorFlow a failed
# collective raises tf.errors.FailedPreconditionError, as Horovod's ops do.
from hvdrun._lib import HorovodInternalError, HvdrunError  # noqa: F401 (re-exported)
from hvdrun._tf_build import library as _library_path
from hvdrun.tensorflow.util import _executing_eagerly

_WHAT = "hvdrun.tensorflow"

_C_OP = _job.C_OP
_FROM_C_OP = {v: k for k, v in _C_OP.items()}

# ---- the op library --------------------------------------------------------------------

_load_lock = threading.Lock()
_ops = None


def _bind(path):
    lib = _lib.lib()
    names = ("hvdrun_submit_then", "hvdrun_wait", "hvdrun_poll", "hvdrun_last_error",
             "hvdrun_rank", "hvdrun_size", "hvdrun_local_rank", "hvdrun_local_size",
             "hvdrun_cross_rank", "hvdrun_cross_size", "hvdrun_process_set_ranks",
             "hvdrun_reducescatter_rows")
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
        process_sets: process sets (ProcessSet objects or rank lists) to add on every
            rank, in this order; "dynamic" is accepted (see add_process_set).
    """
    _job.init(_WHAT, comm, process_sets)
    _lib_ops()


def shutdown():
    """Leaves the job (agreed with the other ranks) and releases the communicators."""
    _job.shutdown(_WHAT)


def is_initialized():
    """True between init() and shutdown()."""
    return _job.is_initialized()


(rank, size, local_rank, local_size, cross_rank, cross_size,
 generation) = _job.queries(_WHAT, __name__)


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
    """The id of `process_set` for the ops (0: every rank)."""
    return _job.check_process_set(process_set, f"{_WHAT}.{what}")


def _process_set_of(op):
    """The process set an op of this library was built for (for its gradient)."""
    return _job.process_set_by_id(op.get_attr("process_set_id"))


def handle_average_backwards_compatibility(op, average):
    """Horovod's resolution of the deprecated `average` flag against `op`: Average by
    default, Sum for average=False; giving both raises."""
    return _job.resolve_op(op, average, _WHAT)


# ---- names -----------------------------------------------------------------------------

def _normalize_name(name):
    """A tensor name as an op name (Horovod's rule)."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _tensor_names(tensors):
    """The names of `tensors` in a graph (eagerly they have none). An input of a
    tf.function (an argument, or a tensor or variable it captured) is named by its place
    among the function's inputs: TensorFlow names captures after a process-wide counter,
    which differs between ranks as soon as one rank has built a tensor more than another."""
    if _executing_eagerly():
        return []
    graph = tf.compat.v1.get_default_graph()
    inputs = getattr(graph, "inputs", None) or []
    names = []
    for t in tensors:
        if t.op.type == "Placeholder" and t.graph is graph:
            place = next((i for i, x in enumerate(inputs) if x is t), None)
            if place is not None:
                names.append(f"input{place}")
                continue
        names.append(t.name)
    return names


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
    return _reducing_op("Allreduce", tensor, name, op, prescale_factor, postscale_factor,
                        ignore_name_scope, process_set)


def _reducing_op(kind, tensor, name, op, prescale_factor, postscale_factor, ignore_name_scope,
                 process_set):
    """The op Hvdrun<kind> (Allreduce or Reducescatter) of `tensor`."""
    ps = _check_process_set(process_set, kind.lower())
    tensor = tf.convert_to_tensor(tensor)
    build = getattr(_lib_ops(), f"hvdrun_{kind.lower()}")
    return build(tensor, reduce_op=_C_OP[op], prescale_factor=prescale_factor,
                 postscale_factor=postscale_factor, process_set_id=ps,
                 tensor_name=_collective_name(kind, _tensor_names([tensor]), name,
                                              ignore_name_scope))


@_framework_ops.RegisterGradient("HvdrunAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the allreduce of the gradient (Horovod's)."""
    return _allreduce(grad, op=_FROM_C_OP[op.get_attr("reduce_op")],
                      prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"),
                      process_set=_process_set_of(op))


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
    ps = _check_process_set(process_set, "grouped_allreduce")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    out = [None] * len(tensors)
    by_type = {}
    for i, t in enumerate(tensors):
        by_type.setdefault(t.dtype, []).append(i)
    for dtype, idx in by_type.items():
        members = [tensors[i] for i in idx]
        if dtype not in _REDUCIBLE_GROUPED or len(members) == 1:
            results = [_allreduce(t, None if name is None else f"{name}.{dtype.name}.{k}", op,
                                  prescale_factor, postscale_factor, ignore_name_scope,
                                  process_set)
                       for k, t in enumerate(members)]
        else:
            tag = None if name is None else f"{name}.{dtype.name}"
            results = _lib_ops().hvdrun_grouped_allreduce(
                members, reduce_op=_C_OP[op], prescale_factor=prescale_factor,
                postscale_factor=postscale_factor, fusion_bytes=_fusion_bytes(),
                process_set_id=ps,
                tensor_name=_collective_name("GroupedAllreduce",
                                             _tensor_names([members[0], members[-1]]), tag,
                                             ignore_name_scope))
        for i, r in zip(idx, results):
            out[i] = r
    return out


@_framework_ops.RegisterGradient("HvdrunGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=_FROM_C_OP[op.get_attr("reduce_op")],
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"),
                              process_set=_process_set_of(op))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension, in rank order. The
    first dimension may differ between ranks; the others may not. Differentiable."""
    ps = _check_process_set(process_set, "allgather")
    tensor = tf.convert_to_tensor(tensor)
    return _lib_ops().hvdrun_allgather(
        tensor, process_set_id=ps, tensor_name=_collective_name(
            "Allgather", _tensor_names([tensor]), name, ignore_name_scope))


@_framework_ops.RegisterGradient("HvdrunAllgather")
def _allgather_grad(op, grad):
    """Horovod's: the gradient averaged over the ranks, then this rank's rows of it."""
    process_set = _process_set_of(op)
    grad = _allreduce(grad, op=Average, process_set=process_set)
    with tf.device("/cpu:0"):
        d = tf.reshape(tf.shape(op.inputs[0])[0], [1])
        d = tf.reshape(allgather(d, process_set=process_set), [process_set.size()])
    return tf.split(grad, num_or_size_splits=d, axis=0)[process_set.rank()]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """allgather of each tensor of a list; returns the list of results."""
    return [allgather(t, None if name is None else f"{name}.{i}", ignore_name_scope,
                      process_set) for i, t in enumerate(tensors)]


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Rank `root_rank`'s `tensor` on every rank (any element type, bit for bit).
    Differentiable as Horovod's: the root gets the averaged gradient, the others zero."""
    ps = _check_process_set(process_set, "broadcast")
    tensor = tf.convert_to_tensor(tensor)
    return _lib_ops().hvdrun_broadcast(
        tensor, root_rank=root_rank, process_set_id=ps, tensor_name=_collective_name(
            "Broadcast", _tensor_names([tensor]), name, ignore_name_scope))


@_framework_ops.RegisterGradient("HvdrunBroadcast")
def _broadcast_grad(op, grad):
    reduced = _allreduce(grad, op=Average, process_set=_process_set_of(op))
    # The same ops on every rank (later collectives are named after tensors of this graph).
    return reduced * (1 if rank() == op.get_attr("root_rank") else 0)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrites `variables` on every rank with rank `root_rank`'s values; returns the
    new values."""
    _check_process_set(process_set, "broadcast_")
    return [v.assign(broadcast(v, root_rank, None if name is None else f"{name}.{i}",
                               process_set=process_set))
            for i, v in enumerate(variables)]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends slices of `tensor`'s first dimension to every rank of the process set
    (splits[j] rows to its j-th rank; equal parts without splits) and returns the slices
    received, concatenated in rank order; with `splits`, also the rows received from each
    rank (int32). The other dimensions must be the same on every rank. Differentiable:
    the gradient travels back the same way."""
    ps = _check_process_set(process_set, "alltoall")
    tensor = tf.convert_to_tensor(tensor)
    splits_ = (tf.cast(tf.convert_to_tensor(splits), tf.int32) if splits is not None
               else tf.constant([], dtype=tf.int32))
    output, received = _lib_ops().hvdrun_alltoall(
        tensor, splits_, process_set_id=ps, tensor_name=_collective_name(
            "Alltoall", _tensor_names([tensor]), name, ignore_name_scope))
    return (output, received) if splits is not None else output


@_framework_ops.RegisterGradient("HvdrunAlltoall")
def _alltoall_grad(op, grad_wrt_output, _grad_wrt_received_splits):
    """Horovod's: the gradient sent back, each rank returning the rows it received."""
    grad, _ = alltoall(grad_wrt_output, splits=op.outputs[1],
                       process_set=_process_set_of(op))
    return [grad, None]


_REDUCESCATTER_OPS = (Sum, Average)


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """The raw reducescatter op: `tensor` reduced over the process set, this rank's slice
    of the first dimension returned (ranks below rows % size get one row more)."""
    if op not in _REDUCESCATTER_OPS:
        raise NotImplementedError(
            f"{_WHAT}.reducescatter: op=hvd.Sum and hvd.Average are supported (as Horovod), "
            f"not {_job.OP_NAMES.get(op, op)}")
    return _reducing_op("Reducescatter", tensor, name, op, prescale_factor, postscale_factor,
                        ignore_name_scope, process_set)


@_framework_ops.RegisterGradient("HvdrunReducescatter")
def _reducescatter_grad(op, grad):
    """Horovod's: the gradient (times the set's size for Sum, times the scale factors)
    gathered from every rank of the set."""
    process_set = _process_set_of(op)
    factor = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if _FROM_C_OP[op.get_attr("reduce_op")] == Sum:
        factor *= process_set.size()
    if factor != 1.0:
        grad = grad * tf.cast(factor, grad.dtype)
    return allgather(grad, process_set=process_set)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    """_reducescatter of each tensor of a list (one collective each, submitted together);
    returns the list of slices."""
    return [_reducescatter(t, None if name is None else f"{name}.{i}", op, ignore_name_scope,
                           process_set, prescale_factor, postscale_factor)
            for i, t in enumerate(tensors)]


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


def _query_op(which, name, process_set_id=0):
    return _lib_ops().hvdrun_query(which=which, process_set_id=process_set_id, name=name)


def size_op(process_set_id=0, name=None):
    """size() (of process set `process_set_id`) as an op, read when the graph runs."""
    return _query_op(1, name, process_set_id)


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
    """As an op, read when the graph runs: 1 when this rank belongs to process set
    `process_set_id`, 0 when not, -3 (Horovod's code) when there is no such set."""
    return _query_op(6, name, process_set_id)


_framework_ops.NotDifferentiable("HvdrunQuery")
