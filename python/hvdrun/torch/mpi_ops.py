"""Horovod's tensor collectives (`horovod.torch.mpi_ops`) over libhvdrun's C ABI.

Every collective is submitted to libhvdrun's queue, which runs them one at a time in
submission order on a background thread; a handle here is an int naming one or more
submitted C handles plus what must stay alive until they finish and what to do after
(postscale, copying a widened integer tensor back, trimming a padded allgather).

Before data moves, the ranks agree on every collective (libhvdrun's negotiation): a named
collective meets the one of the same name on every rank, in any submission order; unnamed
ones meet by their order. A mismatch (shape, dtype, op, root, scale factors) fails that
collective on every rank with HorovodInternalError naming both sides, and the job goes on.

Host (CPU) tensors go through Gloo; CUDA tensors through NCCL, enqueued on the tensor
device's current stream (the handle completes once enqueued: later work on that stream
sees the result, as with Horovod's synchronize()).
"""
import ctypes
import threading

import torch

from hvdrun import _job, _lib
from hvdrun._job import (OP_NAMES as _OP_NAMES, Average, Max, Min,  # noqa: F401
                         ProcessSet, Product, Sum, add_process_set, ccl_built, ddl_built,
                         global_process_set, gloo_built, gloo_enabled, is_homogeneous,
                         is_initialized, mpi_built, mpi_enabled, remove_process_set,
                         rocm_built)
from hvdrun._lib import HorovodInternalError, HvdrunError  # noqa: F401 (re-exported)
from hvdrun.torch import _outputs, _submission
from hvdrun.torch.compression import Compression
# The submission machinery and its constants, used here and by the modules beside this one.
from hvdrun.torch._submission import (  # noqa: F401
    _C_OP, _COMPLEX, _DESCRIBED_MAX, _NATIVE, _WHAT, _WIDENED, _after, _check,
    _check_process_set, _description, _device_of, _divide, _output_like, _register,
    _register_group, _resolve_op, _scale, _set_rank, _set_size, _stream, _submit,
    _submit_allreduce, _submit_bytes, poll, synchronize)


# ---- job -----------------------------------------------------------------------------

def init(comm=None, process_sets=None):
    """Joins the job that `hvdrun` started (reads the HVDRUN_* environment, meets the
    other ranks at the rendezvous, builds the communicators). Idempotent. A program
    started without hvdrun (none of its job variables set) runs as a single process,
    rank 0 of 1.

    Arguments:
        comm: Horovod's MPI communicator or list of ranks; not supported (must be None).
        process_sets: process sets (ProcessSet objects or rank lists) to add on every
            rank, in this order; "dynamic" is accepted (see add_process_set).
    """
    _job.init(_WHAT, comm, process_sets)


def shutdown():
    """Leaves the job and releases the communicators. Collectives still pending are
    waited for first. Idempotent. Pooled output memory is released as its tensors go."""
    _job.shutdown(_WHAT)
    _submission.forget_pending()
    _outputs.clear()


(rank, size, local_rank, local_size, cross_rank, cross_size,
 generation) = _job.queries(_WHAT, __name__)


def mpi_threads_supported():
    """Horovod raises when MPI is not in use; so does hvdrun, which never uses MPI."""
    raise ValueError(f"{_WHAT}.mpi_threads_supported: hvdrun does not use MPI")


def nccl_built():
    """True when CUDA tensors can be reduced: after init(), whether NCCL was loaded and
    a communicator built; before init(), whether libnccl.so.2 can be loaded at all."""
    lib = _lib.lib()
    if lib.hvdrun_is_initialized():
        return lib.hvdrun_nccl_available() == 1
    try:
        ctypes.CDLL("libnccl.so.2")
        return True
    except OSError:
        return False


def cuda_built():
    """True when torch sees a CUDA device (hvdrun loads CUDA and NCCL at run time)."""
    return torch.cuda.is_available()



def _allreduce_async(tensor, output, op, prescale_factor, postscale_factor, what, name=None,
                     blocking=False, ps=0):
    """Reduces `tensor` into `output` (the same tensor when in place)."""
    _device_of(tensor, what)
    in_place = output is tensor
    if in_place and not tensor.is_contiguous():
        raise ValueError(f"hvdrun.torch.{what}: tensor is required to be contiguous")
    dtype = tensor.dtype
    finish_steps = []
    divide_by = None
    # libhvdrun applies the scale factors to host tensors; a CUDA tensor's are applied here.
    scale_here = tensor.is_cuda
    if tensor.is_cuda and op == Average:
        # Summed by NCCL and divided here, as Horovod's GPU path does.
        op, divide_by = Sum, _set_size(ps)
    if dtype in _NATIVE or dtype in _COMPLEX:
        if dtype in _COMPLEX and op not in (Sum, Average):
            raise NotImplementedError(
                f"hvdrun.torch.{what}: op {_OP_NAMES[op]} on complex tensors is not "
                "supported; use Sum or Average")
        src = tensor if tensor.is_contiguous() else tensor.contiguous()
        if scale_here and prescale_factor != 1.0:
            if in_place:
                _scale(tensor, prescale_factor)
            else:
                output.copy_(src)
                _scale(output, prescale_factor)
                src = output
        send, recv = src, output
        if dtype in _COMPLEX:
            send, recv = torch.view_as_real(send), torch.view_as_real(recv)
        ctype = _NATIVE[send.dtype]
        keep = (tensor, send, recv, output)
    elif dtype in _WIDENED:
        wide = tensor.to(torch.int32)
        if scale_here:
            _scale(wide, prescale_factor)
        send = recv = wide
        ctype = _lib.INT32
        keep = (tensor, wide, output)
        finish_steps.append(lambda: output.copy_(wide))
    elif dtype == torch.bool:
        raise NotImplementedError(
            f"hvdrun.torch.{what}: allreduce of torch.bool is not supported; convert to "
            "torch.uint8 or torch.int32 first (Max is logical or, Min logical and)")
    else:
        raise NotImplementedError(
            f"hvdrun.torch.{what}: tensors of {dtype} are not supported; use float16/32/64, "
            "bfloat16, int8/16/32/64, uint8 or complex64/128")
    if divide_by is not None:
        finish_steps.append(lambda: _divide(output, divide_by))
    if scale_here and postscale_factor != 1.0:
        finish_steps.append(lambda: _scale(output, postscale_factor))
    h = _submit_allreduce(send, recv, ctype, op, what, name, tensor, prescale_factor,
                          postscale_factor, blocking, ps)
    handles = [] if blocking else [h]
    stream = _stream(output) if output.is_cuda else None
    return _register(handles, keep, _after(stream, output.device, finish_steps, output))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over all ranks into a new tensor; `tensor` is not
    modified. Returns a handle for poll() and synchronize(), which returns the result.

    Arguments:
        tensor: the tensor to reduce (CPU or CUDA).
        average: deprecated Horovod flag (True: Average, False: Sum); use op.
        name: matches this collective by name on every rank (any submission order);
            unnamed collectives match by their order.
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the tensor before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks to reduce among (default: every rank).
    """
    ps = _check_process_set(process_set, "allreduce_async")
    op = _resolve_op(op, average, "allreduce_async")
    _device_of(tensor, "allreduce_async")
    output = _output_like(tensor)
    return _allreduce_async(tensor, output, op, prescale_factor, postscale_factor,
                            "allreduce_async", name, ps=ps)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over all ranks in place (it must be contiguous and left
    alone until synchronize()). Arguments as allreduce_async."""
    ps = _check_process_set(process_set, "allreduce_async_")
    op = _resolve_op(op, average, "allreduce_async_")
    return _allreduce_async(tensor, tensor, op, prescale_factor, postscale_factor,
                            "allreduce_async_", name, ps=ps)


class _AllreduceFn(torch.autograd.Function):
    """allreduce as an autograd function: the gradient is allreduced the same way."""

    @staticmethod
    def forward(ctx, tensor, op, prescale_factor, postscale_factor, name, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        # Blocking: run on this thread rather than hand over to libhvdrun's and wait.
        _device_of(tensor, "allreduce")
        output = _output_like(tensor)
        ps = _check_process_set(process_set, "allreduce")
        return synchronize(_allreduce_async(tensor, output, op, prescale_factor,
                                            postscale_factor, "allreduce", name, blocking=True,
                                            ps=ps))

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, process_set = ctx.args
        return allreduce(grad_output, op=op, prescale_factor=pre, postscale_factor=post,
                         process_set=process_set), None, None, None, None, None


# hvd.allreduce's common case, prepared once per (dtype, shape, op, name) and thread: a
# contiguous CPU tensor of a type the library reduces natively, every rank, no gradient to
# record, no scaling or compression. A call then allocates the output, fills in the two
# buffer addresses of the prepared description and makes one C call on this thread with
# ctypes objects built once (ctypes converts nothing). CPU time per call, 1 float at np 1
# on the 2-core machine: 2.4 us, against 3.9 us when each call looked its description up
# by eleven fields and ctypes converted its arguments; 0.76 us of it is torch.empty_like.
_plans = threading.local()
_NOT_PLAIN = object()  # cached for a key whose tensors take the general path
_STRIDED = torch.strided
_NO_COMPRESSION = Compression.none


class _Plan:
    __slots__ = ("c", "ref", "size", "keep", "numel", "nbytes", "pooled", "run")

    def __init__(self, c, ref, size, keep, numel, nbytes):
        self.c, self.ref, self.size, self.keep = c, ref, ctypes.c_size_t(size), keep
        self.numel, self.nbytes = numel, nbytes
        self.pooled = nbytes >= _outputs.POOLED_FROM
        self.run = _lib.raw("hvdrun_run")  # no argtypes: ref and size are ctypes objects


def _plan(tensor, op, name):
    """The prepared call for tensors like `tensor` reduced with `op` (as the caller gave it)
    under `name`, or _NOT_PLAIN for the general path; cached for this thread when `name` is
    a string or None. An op hvdrun lacks raises here, and nothing is cached for it."""
    if not (name is None or type(name) is str):
        return _NOT_PLAIN
    ctype = _NATIVE.get(tensor.dtype)
    plan = _NOT_PLAIN
    if ctype is not None:
        resolved = _resolve_op(op, None, "allreduce")
        c, ref, size_, keep = _description(_lib.KIND_ALLREDUCE, ctype, _C_OP[resolved], 0,
                                           False, name, tensor, 1.0, 1.0, 0)
        c.count = tensor.numel()
        c.cuda_stream = None
        plan = _Plan(c, ref, size_, keep, tensor.numel(),
                     tensor.numel() * tensor.element_size())
    plans = getattr(_plans, "cache", None)
    if plans is None or len(plans) >= _DESCRIBED_MAX:
        plans = _plans.cache = {}
    plans[(tensor.dtype, tensor.shape, op, name)] = plan
    return plan


def _run_plan(plan, tensor):
    if plan.pooled:
        out = _outputs.pooled(tensor.dtype, tensor.shape, plan.numel, plan.nbytes)
    else:
        out = torch.empty_like(tensor)
    c = plan.c
    c.send = tensor.data_ptr()
    c.recv = out.data_ptr()
    rc = plan.run(plan.ref, plan.size)
    if rc < 0:
        _check(rc, "allreduce")
    return out


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks and returns the result as a new tensor; `tensor`
    is not modified. Differentiable: the gradient is reduced with the same op.

    Arguments:
        tensor: the tensor to reduce (CPU or CUDA).
        average: deprecated Horovod flag (True: Average, False: Sum); use op.
        name: matches this collective by name on every rank (any submission order);
            unnamed collectives match by their order.
        compression: Compression.none or Compression.fp16 (reduces in float16).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor: multiplies the tensor before the reduction.
        postscale_factor: multiplies the result after the reduction.
        process_set: the ranks to reduce among (default: every rank).
    """
    if (type(tensor) is torch.Tensor and tensor.is_cpu and tensor.layout is _STRIDED
            and average is None and compression is _NO_COMPRESSION
            and process_set is global_process_set and prescale_factor == 1.0
            and postscale_factor == 1.0 and not (tensor.requires_grad and torch.is_grad_enabled())
            and tensor.is_contiguous()):
        try:
            plan = _plans.cache[(tensor.dtype, tensor.shape, op, name)]
        except (AttributeError, KeyError, TypeError):
            plan = _plan(tensor, op, name)
        if plan is not _NOT_PLAIN:
            return _run_plan(plan, tensor)
    _check_process_set(process_set, "allreduce")
    op = _resolve_op(op, average, "allreduce")
    compressed, ctx = compression.compress(tensor)
    reduced = _AllreduceFn.apply(compressed, op, prescale_factor, postscale_factor, name,
                                 process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks in place and returns it. Arguments as
    allreduce_async."""
    ps = _check_process_set(process_set, "allreduce_")
    op = _resolve_op(op, average, "allreduce_")
    return synchronize(_allreduce_async(tensor, tensor, op, prescale_factor, postscale_factor,
                                        "allreduce_", name, blocking=True, ps=ps))


def _one_device(tensors, what):
    """A grouped collective's tensors must share one device, as in Horovod."""
    devices = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devices) > 1:
        raise HorovodInternalError(
            f"hvdrun.torch.{what}: the tensors of one group are on different devices "
            f"({', '.join(sorted(str(d) for d in devices))}); group CPU and GPU tensors "
            "separately")


def _member(name, i):
    """The name of member `i` of a grouped collective named `name` (None stays None)."""
    return None if name is None else f"{name}.{i}"


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing each tensor of a list; one handle whose synchronize() returns the
    list of results. Arguments as allreduce_async."""
    _one_device(tensors, "grouped_allreduce_async")
    handles = [allreduce_async(t, average, _member(name, i), op, prescale_factor,
                               postscale_factor, process_set) for i, t in enumerate(tensors)]
    return _register_group(handles)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce_async."""
    _one_device(tensors, "grouped_allreduce_async_")
    handles = [allreduce_async_(t, average, _member(name, i), op, prescale_factor,
                                postscale_factor, process_set) for i, t in enumerate(tensors)]
    return _register_group(handles)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces each tensor of a list; returns the list of results."""
    _one_device(tensors, "grouped_allreduce")
    return [allreduce(t, average, _member(name, i), compression, op, prescale_factor,
                      postscale_factor, process_set) for i, t in enumerate(tensors)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces each tensor of a list in place; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- broadcast -----------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, what, name=None, ps=0):
    _device_of(tensor, what)
    if output is tensor and not tensor.is_contiguous():
        raise ValueError(f"hvdrun.torch.{what}: tensor is required to be contiguous")
    if output is not tensor:
        output.copy_(tensor)
    handles = [_submit_bytes("b", output, None, root_rank, what, name, tensor, ps)]
    stream = _stream(output) if output.is_cuda else None
    return _register(handles, (tensor, output), _after(stream, output.device, (), output))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying `tensor` of rank `root_rank` to a new tensor on every rank; returns
    a handle whose synchronize() returns it. `tensor` is not modified."""
    ps = _check_process_set(process_set, "broadcast_async")
    _device_of(tensor, "broadcast_async")
    output = _output_like(tensor)
    return _broadcast_async(tensor, output, root_rank, "broadcast_async", name, ps)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts overwriting `tensor` on every rank with rank `root_rank`'s, in place."""
    ps = _check_process_set(process_set, "broadcast_async_")
    return _broadcast_async(tensor, tensor, root_rank, "broadcast_async_", name, ps)


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:  # root_rank is a rank of the job, as in Horovod
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns rank `root_rank`'s `tensor` on every rank, as a new tensor; `tensor` is
    not modified. Differentiable as Horovod's (the root gets the averaged gradient)."""
    _check_process_set(process_set, "broadcast")
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` on every rank with rank `root_rank`'s, in place; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- allgather -----------------------------------------------------------------------

def _wait(h, what):
    if _lib.lib().hvdrun_wait(h) != 0:
        raise HorovodInternalError(f"hvdrun.torch.{what}: {_lib.last_error()}")


def _allgather_async(tensor, what, name=None, ps=0):
    """Two collectives: every rank's first dimension (on which the ranks also agree about
    the other dimensions and the dtype, so a mismatch fails before data moves), then the
    rows, padded to the longest rank's. The second is submitted by libhvdrun's thread the
    moment the first completes (hvdrun_submit_then), so it follows at the same point of
    the agreed order on every rank, however the ranks synchronize their handles."""
    _device_of(tensor, what)
    if tensor.dim() == 0:
        raise ValueError(f"hvdrun.torch.{what}: the tensor needs at least one dimension "
                         "(allgather concatenates along the first); use tensor.reshape(1)")
    n = _set_size(ps)
    src = tensor if tensor.is_contiguous() else tensor.contiguous()
    rest = tuple(src.shape[1:])
    row = 1
    for d in rest:
        row *= d
    rowbytes = row * src.element_size()
    first = torch.tensor([src.shape[0]], dtype=torch.int64)
    firsts_t = torch.empty(n, dtype=torch.int64)
    step = {}

    def submit_rows(_arg, seq):
        # The rows' collective is named after the sizes' (their agreed position when
        # unnamed): the same name on every rank, whatever else a rank submits meanwhile.
        base = name if name is not None else f"allgather.{seq}"
        try:
            firsts = firsts_t.tolist()
            biggest = max(firsts)
            step["firsts"] = firsts
            if biggest == 0 or rowbytes == 0:
                return
            if src.shape[0] == biggest:
                send = src.reshape(-1).view(torch.uint8)
            else:
                send = torch.zeros(biggest * rowbytes, dtype=torch.uint8, device=src.device)
                send[: src.numel() * src.element_size()].copy_(src.reshape(-1).view(torch.uint8))
            recv = torch.empty(n * biggest * rowbytes, dtype=torch.uint8, device=src.device)
            step["rows"] = (send, recv, biggest)
            step["handle"] = _submit_bytes("g", send, recv, 0, what, base + ".data", ps=ps)
        except BaseException as e:  # noqa: B036 - reported by synchronize()
            step["error"] = e

    then = _lib.THEN(submit_rows)
    h1 = _submit(_lib.KIND_ALLGATHER, what, first.data_ptr(), firsts_t.data_ptr(), 1,
                 _lib.INT64, name=name, like=src, then=then, ps=ps)
    stream = _stream(src) if src.is_cuda else None

    def finish():
        if "error" in step:
            raise step["error"]
        firsts = step["firsts"]
        if "handle" not in step:
            return src.new_empty((sum(firsts),) + rest)
        _wait(step["handle"], what)
        _send, recv, biggest = step["rows"]
        _after(stream, src.device, (), None)()
        if all(f == biggest for f in firsts):
            return recv.view(src.dtype).view((n * biggest,) + rest)
        parts = recv.view(n, biggest * rowbytes)
        out = torch.cat([parts[r, : firsts[r] * rowbytes] for r in range(n)])
        return out.view(src.dtype).view((sum(firsts),) + rest)

    return _register([h1], (tensor, src, first, firsts_t, then), finish)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along the first dimension (which may
    differ between ranks; the other dimensions may not). Returns a handle whose
    synchronize() returns the result. Waits for the ranks' first dimensions before
    returning."""
    ps = _check_process_set(process_set, "allgather_async")
    return _allgather_async(tensor, "allgather_async", name, ps)


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.process_set = tensor.shape[0], process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ctx.process_set)
        me = _set_rank(_check_process_set(ctx.process_set, "allgather"))
        offset = int(dims[:me].sum().item())
        return reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Returns every rank's `tensor` concatenated along the first dimension, in rank
    order (first dimensions may differ between ranks). Differentiable."""
    _check_process_set(process_set, "allgather")
    _device_of(tensor, "allgather")
    if tensor.dim() == 0:
        raise ValueError("hvdrun.torch.allgather: the tensor needs at least one dimension "
                         "(allgather concatenates along the first); use tensor.reshape(1)")
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """allgather_async of each tensor of a list; synchronize() returns the list."""
    handles = [allgather_async(t, _member(name, i), process_set) for i, t in enumerate(tensors)]
    return _register_group(handles)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """allgather of each tensor of a list; returns the list of results."""
    return [allgather(t, _member(name, i), process_set) for i, t in enumerate(tensors)]


# ---- timeline ------------------------------------------------------------------------

def start_timeline(file_path, mark_cycles=False):
    """Starts writing a timeline of every collective to `file_path` on rank 0 (Chrome's
    trace format: open it in chrome://tracing or Perfetto), as Horovod's; with
    `mark_cycles`, a marker per negotiation round. HOROVOD_TIMELINE=file does this at
    init()."""
    _lib.check(_lib.lib().hvdrun_start_timeline(str(file_path).encode(), int(bool(mark_cycles))),
               "hvdrun.torch.start_timeline")


def stop_timeline():
    """Stops the timeline and completes its file."""
    _lib.check(_lib.lib().hvdrun_stop_timeline(), "hvdrun.torch.stop_timeline")


# ---- join and barrier ----------------------------------------------------------------

def join(device=-1):
    """Declares that this rank has no more work and waits until every rank has joined;
    returns the rank that joined last (the same on every rank). Meanwhile this rank
    stands in for the collectives other ranks still submit: zeros for an Average or Sum
    allreduce (Average still divides by size()), the op's identity for Min, Max and
    Product; an allgather or broadcast fails on the ranks that submitted it, as in
    Horovod. `device` is accepted for compatibility: the stand-in runs where the others'
    tensors are."""
    r = _lib.lib().hvdrun_join()
    if r < 0:
        raise HorovodInternalError(f"hvdrun.torch.join: {_lib.last_error()}")
    return r


def barrier(process_set=global_process_set):
    """Returns once every rank (of `process_set`) has entered the barrier (after its
    earlier collectives)."""
    ps = _check_process_set(process_set, "barrier")
    if ps != 0:  # a set's barrier: its smallest collective
        allreduce(torch.zeros(1, dtype=torch.uint8), op=Sum, process_set=process_set)
        return
    _lib.check(_lib.lib().hvdrun_barrier(), "hvdrun.torch.barrier", HorovodInternalError)
