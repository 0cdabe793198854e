"""How hvdrun.torch's collectives reach libhvdrun (mpi_ops.py builds Horovod's API on
this): the element types and reductions of the C ABI, the submission of one described
collective (its description cached per thread, so that a call fills in only its buffers),
and the handles a caller waits on, each naming one or more C handles plus what must stay
alive until they finish and what to do after."""
import ctypes
import itertools
import threading

import torch

from hvdrun import _job, _lib
from hvdrun._lib import HorovodInternalError
from hvdrun.torch import _outputs

_WHAT = "hvdrun.torch"
_C_OP = _job.C_OP

_NATIVE = {
    torch.int32: _lib.INT32,
    torch.int64: _lib.INT64,
    torch.float32: _lib.FLOAT32,
    torch.float64: _lib.FLOAT64,
    torch.float16: _lib.FLOAT16,
    torch.bfloat16: _lib.BFLOAT16,
    torch.uint8: _lib.UINT8,
}
# Reduced as int32 and narrowed back (wrapping exactly as the narrow type's own arithmetic).
_WIDENED = {torch.int8, torch.int16}
_COMPLEX = {torch.complex64, torch.complex128}


def _check_process_set(process_set, what):
    """The id of `process_set` for the C calls (0: every rank)."""
    return _job.check_process_set(process_set, f"{_WHAT}.{what}")


_set_size = _job.set_size
_set_rank = _job.set_rank


# ---- handles -------------------------------------------------------------------------

class _Pending:
    __slots__ = ("handles", "keep", "finish", "group")

    def __init__(self, handles, keep, finish, group):
        self.handles = handles  # C handles, waited for in order
        self.keep = keep  # tensors the library reads or writes until they finish
        self.finish = finish  # called after a successful wait; returns the output
        self.group = group  # member handles of a grouped operation, else None


_pending_lock = threading.Lock()
_pending = {}
_ids = itertools.count(1)


def _register(handles, keep, finish, group=None):
    p = _Pending(handles, keep, finish, group)
    with _pending_lock:
        h = next(_ids)
        _pending[h] = p
    return h


def _register_group(handles):
    return _register([], None, None, handles)


def poll(handle):
    """True when the operation behind `handle` has finished, so that synchronize() will
    not block."""
    with _pending_lock:
        p = _pending.get(handle)
    if p is None:
        return True
    if p.group is not None:
        return all(poll(h) for h in p.group)
    lib = _lib.lib()
    for h in p.handles:
        r = lib.hvdrun_poll(h)
        if r < 0:
            raise HorovodInternalError(f"hvdrun.torch.poll: {_lib.last_error()}")
        if r == 0:
            return False
    return True


def synchronize(handle):
    """Waits for the operation behind `handle` and returns its output tensor (a list for
    a grouped operation; None for a handle unknown or already synchronized, as Horovod).
    Raises HorovodInternalError when the collective failed."""
    with _pending_lock:
        p = _pending.pop(handle, None)
    if p is None:
        return None
    if p.group is not None:
        return [synchronize(h) for h in p.group]
    lib = _lib.lib()
    error = None
    for h in p.handles:
        if lib.hvdrun_wait(h) != 0 and error is None:
            error = _lib.last_error()
    if error is not None:
        raise HorovodInternalError(error)
    return p.finish()


def _after(stream, device, steps, output):
    """The finish of an operation on `output`: orders the current CUDA stream after the
    one the collective was enqueued on, runs `steps`, returns `output`."""
    def finish():
        if stream is not None:
            current = torch.cuda.current_stream(device)
            if current != stream:
                current.wait_stream(stream)
        for step in steps:
            step()
        return output
    return finish


# ---- submission ----------------------------------------------------------------------

def _device_of(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"hvdrun.torch.{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.is_sparse:
        raise NotImplementedError(
            f"hvdrun.torch.{what}: sparse tensors are not supported here; use "
            "hvd.sparse_allreduce_async for a sparse tensor, or reduce tensor.to_dense()")
    dev = tensor.device.type
    if dev == "cpu":
        return False
    if dev == "cuda":
        lib = _lib.lib()
        if lib.hvdrun_nccl_available() != 1:
            status = (lib.hvdrun_nccl_status() or b"").decode(errors="replace")
            raise HorovodInternalError(
                f"hvdrun.torch.{what}: a CUDA tensor needs NCCL, which this rank does not "
                f"have ({status or 'not initialised: call hvd.init() first'}); move the "
                "tensor to the CPU or make libnccl.so.2 loadable")
        return True
    raise NotImplementedError(
        f"hvdrun.torch.{what}: tensors on {tensor.device} are not supported; use CPU or "
        "CUDA tensors")


def _stream(tensor):
    return torch.cuda.current_stream(tensor.device)


def _type_name(dtype):
    return str(dtype).replace("torch.", "")


# Per thread, the collectives already described: what the ranks agree on (kind, type,
# op, root, device, name, shape, scale factors) is set once per description, and a call
# only fills in its buffers, which spares most of the ctypes work per call.
_described = threading.local()
_DESCRIBED_MAX = 4096


def _description(kind, ctype, op, root, on_device, name, like, prescale, postscale, ps=0):
    cache = getattr(_described, "cache", None)
    if cache is None:
        cache = _described.cache = {}
    dims = tuple(like.shape) if like is not None else None
    key = (kind, ctype, op, root, on_device, name, dims, like.dtype if like is not None else None,
           prescale, postscale, ps)
    entry = cache.get(key)
    if entry is not None:
        return entry
    if len(cache) >= _DESCRIBED_MAX:
        cache.clear()
    c = _lib.Collective()
    c.kind = kind
    c.dtype = ctype
    c.op = op
    c.root = root
    c.device = 1 if on_device else 0
    # libhvdrun scales host buffers; a CUDA tensor's factors are applied here (_scale).
    c.caller_scales = 1 if on_device else 0
    keep = []
    if name is not None:
        keep.append(str(name).encode())
        c.name = keep[-1]
    if like is not None:
        shape = (ctypes.c_longlong * max(len(dims), 1))(*dims)
        keep.append(shape)
        c.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_longlong))
        c.ndim = len(dims)
        keep.append(_type_name(like.dtype).encode())
        c.type_name = keep[-1]
    c.prescale = float(prescale)
    c.postscale = float(postscale)
    c.process_set = ps
    entry = cache[key] = (c, ctypes.byref(c), ctypes.sizeof(c), keep)
    return entry


_LONGS = ctypes.POINTER(ctypes.c_longlong)


def _submit(kind, what, send=None, recv=None, count=0, ctype=_lib.UINT8, op=0, root=0,
            device_tensor=None, name=None, like=None, prescale=1.0, postscale=1.0, then=None,
            blocking=False, splits=None, received=None, recv_count=0, ps=0):
    """Submits one collective through hvdrun_submit. `like` is the caller's tensor, whose
    shape and dtype the ranks agree on (with `name`, op, root and the scale factors)
    before any data moves. Returns the C handle; with `blocking`, runs it through
    hvdrun_run on this thread (no hop to the library's thread) and returns None."""
    on_device = device_tensor is not None and device_tensor.is_cuda
    c, ref, size_, _keep = _description(kind, ctype, op, root, on_device, name, like, prescale,
                                        postscale, ps)
    c.send = send
    c.recv = recv
    c.count = count
    c.cuda_stream = _stream(device_tensor).cuda_stream if on_device else None
    c.splits = None if splits is None else ctypes.cast(splits.data_ptr(), _LONGS)
    c.received_splits = None if received is None else ctypes.cast(received.data_ptr(), _LONGS)
    c.recv_count = recv_count
    lib = _lib.lib()
    if blocking:
        h = lib.hvdrun_run(ref, size_)
    elif then is None:
        h = lib.hvdrun_submit(ref, size_)
    else:
        h = lib.hvdrun_submit_then(ref, size_, ctypes.cast(then, ctypes.c_void_p), None)
    _check(h, what)
    return None if blocking else h


def _check(h, what):
    """Raises what Horovod raises for a failed submission (result `h` of the C call): a
    name in flight or this rank's own wrong arguments are ValueError (the job goes on;
    hvd.elastic does not take them for a lost peer), anything else HorovodInternalError."""
    if h in (_lib.DUPLICATE_NAME, _lib.INVALID_ARGUMENT):
        raise ValueError(f"hvdrun.torch.{what}: {_lib.last_error()}")
    if h < 0:
        raise HorovodInternalError(f"hvdrun.torch.{what}: {_lib.last_error()}")


def _submit_allreduce(send, recv, ctype, op, what, name=None, like=None, prescale=1.0,
                      postscale=1.0, blocking=False, ps=0):
    """Submits one allreduce of `send` into `recv` (same device, same size)."""
    return _submit(_lib.KIND_ALLREDUCE, what, send.data_ptr(), recv.data_ptr(), recv.numel(),
                   ctype, _C_OP[op], device_tensor=recv, name=name, like=like,
                   prescale=prescale, postscale=postscale, blocking=blocking, ps=ps)


def _submit_bytes(kind, a, b, root, what, name=None, like=None, ps=0):
    """Broadcast (kind 'b', in place on `a`) or allgather (kind 'g', `a` into `b`) of raw
    bytes: both move any dtype bit for bit; `like` is the tensor the caller sees."""
    n = a.numel() * a.element_size()
    if kind == "b":
        return _submit(_lib.KIND_BROADCAST, what, None, a.data_ptr(), n, _lib.UINT8, root=root,
                       device_tensor=a, name=name, like=like, ps=ps)
    return _submit(_lib.KIND_ALLGATHER, what, a.data_ptr(), b.data_ptr(), n, _lib.UINT8,
                   device_tensor=a, name=name, like=like, ps=ps)


def _resolve_op(op, average, what):
    return _job.resolve_op(op, average, f"{_WHAT}.{what}")


def _scale(t, factor):
    """Multiplies `t` by `factor` in place with Horovod's arithmetic: integers in float64
    (then truncated); half precision on the CPU in float32, rounded once; half precision
    on a GPU by the factor rounded to the tensor's own type."""
    if factor == 1.0:
        return
    if t.dtype in (torch.float16, torch.bfloat16):
        if t.is_cuda:
            t.mul_(torch.tensor(factor, dtype=t.dtype, device=t.device))
        else:
            t.copy_(t.float().mul_(factor))
    elif t.is_floating_point() or t.is_complex():
        t.mul_(factor)
    else:
        t.copy_(t.double() * factor)


def _divide(t, n):
    """Average's division on a GPU, after a Sum (as Horovod's GPU path): integers
    truncate toward zero, floating point divides by the factor 1/n in the tensor's type."""
    if n == 1:
        return
    if t.is_floating_point() or t.is_complex():
        _scale(t, 1.0 / n)
    else:
        t.copy_(torch.div(t, n, rounding_mode="trunc"))


def _output_like(tensor):
    """A new contiguous tensor like `tensor` for a collective's result (a large host one
    from the pool of _outputs)."""
    if tensor.is_cpu:
        return _outputs.empty(tensor)
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)


def forget_pending():
    """Drops every handle not yet synchronized (shutdown(): their collectives are over)."""
    with _pending_lock:
        _pending.clear()
