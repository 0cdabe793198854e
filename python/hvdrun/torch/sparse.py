"""Sparse tensors across ranks (Horovod's `sparse_allreduce_async`): a sparse COO tensor
is reduced by gathering every rank's indices and values (two allgathers) and building a
sparse tensor of the same size from all of them. Its duplicate indices add up when the
result is coalesced or used, which makes the sum; Average divides the values by the
number of ranks. The gathered entries are the same, in the same order, on every rank, so
every rank computes bit-identical results from them.

DistributedOptimizer uses sparse_allreduce_async and `apply_sparse_gradient` for parameters
whose gradients come out sparse (nn.Embedding(sparse=True)).
"""
import torch

from hvdrun.torch.mpi_ops import (Average, HorovodInternalError, Sum, allgather_async,
                                  global_process_set, synchronize)


class SparseHandle:
    """What sparse_allreduce_async returns: call it (as in Horovod) to get the reduced
    sparse tensor, or the error its gathers raised."""

    __slots__ = ("_result", "_error")

    def __init__(self, result, error):
        self._result = result
        self._error = error

    def __call__(self):
        if self._error is not None:
            raise self._error
        return self._result


def _check(tensor, op, what):
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        got = type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else \
            f"a {tensor.layout} tensor"
        raise TypeError(f"hvdrun.torch.{what}: expected a sparse COO tensor (torch.sparse_coo), "
                        f"got {got}; reduce dense tensors with allreduce_async")
    if op not in (Average, Sum):
        raise ValueError(f"hvdrun.torch.{what}: op {op!r} is not supported for sparse "
                         "tensors (their entries are gathered, which can only sum); use "
                         "hvd.Average or hvd.Sum")


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces the sparse COO `tensor` over all ranks by gathering every rank's indices
    and values. Returns a callable (as Horovod); calling it returns a sparse tensor of
    `tensor`'s size holding every rank's entries (duplicates sum when coalesced), with the
    values divided by the number of ranks for op=Average, or raises the gathers' error.
    The gathers run before this returns (Horovod's are left in flight).

    Arguments:
        tensor: a sparse COO tensor of the same size on every rank (its number of
            entries may differ between ranks).
        name: the collectives are named `<name>.indices` and `<name>.values`.
        op: hvd.Average or hvd.Sum.
        process_set: the ranks to reduce over.
    """
    _check(tensor, op, "sparse_allreduce_async")
    # allgather concatenates along the first dimension: the indices go as (nnz, ndim).
    indices = tensor._indices().t().contiguous()
    values = tensor._values().contiguous()
    # Both gathers complete here rather than stay in flight: an allgather is two steps
    # (the ranks' first dimensions, then the rows), and the second enters each rank's queue
    # at a time that differs between ranks; with many such gathers outstanding the ranks'
    # queues can then disagree beyond what one negotiation round compares, and stall.
    # Completed one at a time, the gathers keep the same order on every rank.
    try:
        values = synchronize(allgather_async(values, name=f"{name}.values",
                                             process_set=process_set))
        indices = synchronize(allgather_async(indices, name=f"{name}.indices",
                                              process_set=process_set))
    except HorovodInternalError as e:
        return SparseHandle(None, e)
    if op == Average:
        values = values / process_set.size()
    return SparseHandle(torch.sparse_coo_tensor(indices.t(), values, tensor.size()), None)


def apply_sparse_gradient(grad, reduced):
    """Writes the reduced gradient into the parameter's own sparse `grad` (sparse tensors
    cannot be set_, so the entries are replaced). A dense `reduced` (sparse_as_dense) is
    made sparse first, with `grad`'s layout (its number of sparse dimensions). Returns
    `grad`."""
    if not reduced.is_sparse:
        reduced = reduced.to_sparse(grad.sparse_dim())
    grad.zero_().add_(reduced.coalesce())
    return grad
