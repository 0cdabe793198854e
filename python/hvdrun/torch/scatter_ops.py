"""alltoall and reducescatter with Horovod's names, arguments and gradients.

Both go through libhvdrun's negotiated collectives: the ranks agree on the element type
and the dimensions after the first before any data moves. alltoall first shares every
rank's splits (so each rank sizes its output), then exchanges the rows pairwise;
reducescatter reduces each rank's slice of the first dimension where it is needed
(ranks below rows % size get one row more, as in Horovod).
"""
import collections
import itertools

import torch

from hvdrun import _lib
from hvdrun.torch import mpi_ops as _ops
from hvdrun.torch.compression import Compression
from hvdrun.torch.mpi_ops import Average, Sum, global_process_set


# Blocking alltoalls so far, per process set: the same count on every member of a set.
_blocking_calls = collections.defaultdict(itertools.count)


def _rows_and_rest(src):
    rest = tuple(src.shape[1:])
    row = 1
    for d in rest:
        row *= d
    return rest, row


def _send_rows(splits, rows, n, what):
    """The rows this rank sends to each rank, checked as Horovod checks them."""
    if splits is None:
        if rows % n != 0:
            raise ValueError(
                f"hvdrun.torch.{what}: the first dimension ({rows}) cannot be split equally "
                f"among {n} ranks; pass splits (rows for each rank)")
        return [rows // n] * n
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64) or splits.dim() != 1:
            raise ValueError(
                f"hvdrun.torch.{what}: splits must be a 1-D tensor of int32, not "
                f"{tuple(splits.shape)} {splits.dtype}")
        out = splits.tolist()
    else:
        out = [int(s) for s in splits]
    if len(out) != n:
        raise ValueError(f"hvdrun.torch.{what}: splits has {len(out)} entries; give one per "
                         f"rank ({n})")
    if any(s < 0 for s in out):
        raise ValueError(f"hvdrun.torch.{what}: splits {out} has a negative entry")
    if sum(out) > rows:
        raise ValueError(f"hvdrun.torch.{what}: splits add up to {sum(out)} rows but the "
                         f"tensor's first dimension is {rows}")
    return out


def _alltoall_async(tensor, splits, what, name=None, ps=0, blocking=False):
    """Two collectives: every rank's splits (an allgather, on which the ranks also agree
    about the other dimensions and the dtype), then the rows. The second is submitted by
    libhvdrun's thread the moment the first completes, so it follows at the same point of
    the agreed order on every rank."""
    _ops._device_of(tensor, what)
    if tensor.dim() == 0:
        raise ValueError(f"hvdrun.torch.{what}: the tensor needs at least one dimension "
                         "(alltoall splits the first)")
    n, me = _ops._set_size(ps), _ops._set_rank(ps)
    src = tensor if tensor.is_contiguous() else tensor.contiguous()
    rest, row = _rows_and_rest(src)
    rowbytes = row * src.element_size()
    send_rows = _send_rows(splits, src.shape[0], n, what)
    mine = torch.tensor(send_rows, dtype=torch.int64)
    table = torch.empty(n * n, dtype=torch.int64)
    step = {}

    def submit_rows(_arg, seq):
        # The rows' collective is named after the splits' (their agreed position when
        # unnamed; a blocking call's own count), so it matches on every rank whatever else
        # a rank submits meanwhile.
        base = name if name is not None else f"alltoall.{ps}.{seq}"
        try:
            every = table.view(n, n)
            recv_rows = every[:, me].tolist()
            step["recv_rows"] = recv_rows
            out = src.new_empty((sum(recv_rows),) + rest)
            step["out"] = out
            if rowbytes == 0 or int(every.sum()) == 0:
                return  # nothing moves on any rank: every rank skips alike
            send = torch.tensor([r * rowbytes for r in send_rows], dtype=torch.int64)
            received = torch.empty(n, dtype=torch.int64)
            data = src.reshape(-1).view(torch.uint8) if src.numel() else src.view(torch.uint8)
            step["keep"] = (send, received, data)
            step["handle"] = _ops._submit(
                _lib.KIND_ALLTOALL, what, data.data_ptr(), out.data_ptr(),
                sum(send_rows) * rowbytes, _lib.UINT8, device_tensor=src, name=base + ".rows",
                like=src, splits=send, received=received,
                recv_count=sum(recv_rows) * rowbytes, ps=ps, blocking=blocking)
        except BaseException as e:  # noqa: B036 - reported by synchronize()
            step["error"] = e

    if blocking:
        # Both steps on this thread, one after the other: no hop to the library's thread.
        _ops._submit(_lib.KIND_ALLGATHER, what, mine.data_ptr(), table.data_ptr(), n,
                     _lib.INT64, name=name, like=src, blocking=True, ps=ps)
        submit_rows(None, f"b{next(_blocking_calls[ps])}")
        h1 = None
    else:
        then = _lib.THEN(submit_rows)
        h1 = _ops._submit(_lib.KIND_ALLGATHER, what, mine.data_ptr(), table.data_ptr(), n,
                          _lib.INT64, name=name, like=src, then=then, ps=ps)
    stream = _ops._stream(src) if src.is_cuda else None

    def finish():
        if "error" in step:
            raise step["error"]
        if step.get("handle") is not None:
            _ops._wait(step["handle"], what)
        if "keep" in step:
            _ops._after(stream, src.device, (), None)()
        return step["out"], torch.tensor(step["recv_rows"], dtype=torch.int32)

    if blocking:
        return finish()
    return _ops._register([h1], (tensor, src, mine, table, then), finish)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending slices of `tensor`'s first dimension to every rank (splits[j] rows to
    rank j; equal parts without splits) and gathering the slices every rank sends this one.
    Returns a handle whose synchronize() returns (output, received_splits)."""
    ps = _ops._check_process_set(process_set, "alltoall_async")
    return _alltoall_async(tensor, splits, "alltoall_async", name, ps)


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ps = _ops._check_process_set(process_set, "alltoall")
        output, received = _alltoall_async(tensor, splits, "alltoall", name, ps, blocking=True)
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *_dead):
        grad, _ = alltoall(grad_output, splits=ctx.received, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends slices of `tensor`'s first dimension to every rank and returns the slices
    received, concatenated in rank order; with `splits`, also the rows received from each
    rank (an int32 tensor). Differentiable: the gradient travels back the same way."""
    _ops._check_process_set(process_set, "alltoall")
    return _AlltoallFn.apply(tensor, splits, name, process_set)


def _reducescatter_async(tensor, op, prescale_factor, postscale_factor, what, name=None, ps=0):
    _ops._device_of(tensor, what)
    if tensor.dim() == 0:
        raise ValueError(f"hvdrun.torch.{what}: the tensor needs at least one dimension "
                         "(reducescatter splits the first); use tensor.reshape(1)")
    if op not in (Sum, Average):
        raise NotImplementedError(
            f"hvdrun.torch.{what}: reducescatter supports op=hvd.Sum and hvd.Average only "
            "(as Horovod)")
    n = _ops._set_size(ps)
    rest, _row = _rows_and_rest(tensor)
    mine = _lib.lib().hvdrun_reducescatter_rows(tensor.shape[0], ps)  # libhvdrun's split
    if mine < 0:
        raise ValueError(f"hvdrun.torch.{what}: {_lib.last_error()}")
    out = tensor.new_empty((mine,) + rest)
    src = tensor if tensor.is_contiguous() else tensor.contiguous()
    divide_by = None
    # libhvdrun applies the scale factors to host tensors; a CUDA tensor's are applied here.
    scale_here = src.is_cuda
    if src.is_cuda and op == Average:
        op, divide_by = Sum, n  # summed by NCCL and divided here, as Horovod's GPU path
    dtype = src.dtype
    if dtype in _ops._NATIVE or dtype in _ops._COMPLEX:
        send, recv = src, out
        if scale_here and prescale_factor != 1.0:
            send = src.clone()
            _ops._scale(send, prescale_factor)
        if dtype in _ops._COMPLEX:
            if op not in (Sum, Average):
                raise NotImplementedError(f"hvdrun.torch.{what}: complex tensors take Sum or "
                                          "Average")
            send, recv = torch.view_as_real(send), torch.view_as_real(recv)
        ctype = _ops._NATIVE[send.dtype]
        finish_steps = []
    elif dtype in _ops._WIDENED:
        send = src.to(torch.int32)
        if scale_here:
            _ops._scale(send, prescale_factor)
        recv = torch.empty(out.shape, dtype=torch.int32, device=out.device)
        ctype = _lib.INT32
        finish_steps = [lambda: out.copy_(recv)]
    else:
        raise NotImplementedError(
            f"hvdrun.torch.{what}: tensors of {dtype} are not supported; use float16/32/64, "
            "bfloat16, int8/16/32/64, uint8 or complex64/128")
    if divide_by is not None:
        finish_steps.append(lambda: _ops._divide(out, divide_by))
    if scale_here and postscale_factor != 1.0:
        finish_steps.append(lambda: _ops._scale(out, postscale_factor))
    h = _ops._submit(_lib.KIND_REDUCESCATTER, what, send.data_ptr(), recv.data_ptr(),
                     send.numel(), ctype, _ops._C_OP[op], device_tensor=send, name=name,
                     like=src, prescale=prescale_factor, postscale=postscale_factor, ps=ps)
    stream = _ops._stream(out) if out.is_cuda else None
    return _ops._register([h], (tensor, src, send, recv, out),
                          _ops._after(stream, out.device, finish_steps, out))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over all ranks, each rank receiving its slice of the first
    dimension. Returns a handle whose synchronize() returns the slice."""
    ps = _ops._check_process_set(process_set, "reducescatter_async")
    return _reducescatter_async(tensor, op, prescale_factor, postscale_factor,
                                "reducescatter_async", name, ps)


def _scaled_grads(ctx, grads):
    """Horovod's gradient of a reducescatter before the allgather: times the size for Sum,
    times the scale factors."""
    factor = 1.0
    if ctx.op == Sum:
        factor *= _ops._set_size(_ops._check_process_set(ctx.process_set, "reducescatter"))
    factor *= ctx.prescale_factor * ctx.postscale_factor
    return [g * factor if factor != 1.0 else g for g in grads]


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        ps = _ops._check_process_set(process_set, "reducescatter")
        return _ops.synchronize(_reducescatter_async(tensor, op, prescale_factor,
                                                     postscale_factor, "reducescatter", name, ps))

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = _scaled_grads(ctx, [grad_output])
        return _ops.allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over all ranks and returns this rank's slice of the first dimension.
    Differentiable (Horovod's gradient: an allgather)."""
    _ops._check_process_set(process_set, "reducescatter")
    compressed, cctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(compressed, name, op, prescale_factor, postscale_factor,
                                 process_set)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter_async of each tensor of a list; synchronize() returns the list."""
    ps = _ops._check_process_set(process_set, "grouped_reducescatter_async")
    _ops._one_device(tensors, "grouped_reducescatter_async")
    return _ops._register_group([
        _reducescatter_async(t, op, prescale_factor, postscale_factor,
                             "grouped_reducescatter_async", _ops._member(name, i), ps)
        for i, t in enumerate(tensors)])


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(_ops.synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, None, None) + tuple(
            _ops.grouped_allgather(_scaled_grads(ctx, list(grads)), process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor of a list; returns the list of slices."""
    _ops._check_process_set(process_set, "grouped_reducescatter")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    outs = _GroupedReducescatterFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                         *compressed)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]
