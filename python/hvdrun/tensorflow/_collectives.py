"""hvdrun.tensorflow's collectives as a program calls them: allreduce, grouped_allreduce,
reducescatter and grouped_reducescatter, which add Horovod's compression and its handling
of tf.IndexedSlices to the ops of mpi_ops.py. hvdrun.tensorflow re-exports them; they
live here, below its __init__, so that the modules it imports (the gradient reducer,
SyncBatchNormalization) use them without importing it back."""
import tensorflow as tf

from hvdrun.tensorflow.compression import Compression
from hvdrun.tensorflow.mpi_ops import (Average, Sum, _allreduce, _check_process_set,
                                       _grouped_allreduce, _grouped_reducescatter,
                                       _reducescatter, allgather, global_process_set,
                                       handle_average_backwards_compatibility)


def _sparse_allreduce(tensor, op, prescale_factor, postscale_factor, gather, process_set):
    # Horovod's: the values and indices of every rank gathered (an allreduce of the dense
    # tensor they stand for), the values divided by the size for Average.
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")
    values, indices = gather(tensor.values), gather(tensor.indices)
    if op == Average:
        values = values / tf.cast(process_set.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduces a tf.Tensor, tf.Variable or tf.IndexedSlices over all ranks (Average by
    default). An IndexedSlices is gathered instead (values and indices of every rank), as
    Horovod does. Differentiable.

    Arguments:
        tensor: what to reduce; its shape must be the same on every rank.
        average: deprecated Horovod flag (True: Average, False: Sum); use op.
        device_dense, device_sparse: accepted; the ops run on the CPU.
        compression: Compression.none or Compression.fp16.
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor, postscale_factor: multiply before and after the reduction.
        name: matches this collective by name on every rank.
        process_set: the ranks to reduce among (default: every rank).
        ignore_name_scope: leave the name scope out of the collective's name.
    """
    _check_process_set(process_set, "allreduce")
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, prescale_factor, postscale_factor,
                                 lambda t: allgather(t, ignore_name_scope=ignore_name_scope,
                                                     process_set=process_set), process_set)
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor,
                         ignore_name_scope=ignore_name_scope, process_set=process_set)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces each tensor of a list (tf.IndexedSlices gathered, as allreduce does); dense
    tensors of one type are fused into few collectives. Returns the list of results."""
    _check_process_set(process_set, "grouped_allreduce")
    if not tensors:
        return tensors
    op = handle_average_backwards_compatibility(op, average)
    out = [None] * len(tensors)
    dense = []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _sparse_allreduce(
                t, op, prescale_factor, postscale_factor,
                lambda x: allgather(x, ignore_name_scope=ignore_name_scope,
                                    process_set=process_set), process_set)
        else:
            dense.append(i)
    if dense:
        compressed = [compression.compress(tf.convert_to_tensor(tensors[i])) for i in dense]
        reduced = _grouped_allreduce([c for c, _ in compressed], name=name, op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     ignore_name_scope=ignore_name_scope,
                                     process_set=process_set)
        for i, r, (_, ctx) in zip(dense, reduced, compressed):
            out[i] = compression.decompress(r, ctx)
    return out


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the ranks of the process set (Average by default) and returns
    this rank's slice of the first dimension (ranks below rows % size get one row more).
    The shape must be the same on every rank. Differentiable (Horovod's gradient: an
    allgather)."""
    compressed, ctx = compression.compress(tf.convert_to_tensor(tensor))
    reduced = _reducescatter(compressed, name=name, op=op, ignore_name_scope=ignore_name_scope,
                             process_set=process_set, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor of a list; returns the list of slices."""
    if not tensors:
        return tensors
    compressed = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    reduced = _grouped_reducescatter([c for c, _ in compressed], op=op,
                                     process_set=process_set,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]
