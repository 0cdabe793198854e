"""The module body of hvdrun.keras and hvdrun.tensorflow.keras (Horovod's
horovod.keras and horovod.tensorflow.keras, on Keras 3 with the TensorFlow backend): both
import everything from here."""
from hvdrun import _keras as _impl
from hvdrun._keras import callbacks
from hvdrun.tensorflow import (Average, Compression, HorovodInternalError, ProcessSet, Sum,
                               add_process_set, ccl_built, cross_rank, cross_size, cuda_built,
                               ddl_built, global_process_set, gloo_built, gloo_enabled, init,
                               is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                               mpi_threads_supported, nccl_built, rank, remove_process_set,
                               rocm_built, shutdown, size)
from hvdrun.tensorflow import DistributedOptimizer as _tf_distributed_optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A Keras 3 optimizer of `optimizer`'s class and configuration that averages (op:
    Average or Sum) the gradients over the ranks before applying them, as Horovod's.

    Arguments:
        optimizer: the Keras optimizer to distribute (its configuration is copied).
        name: name of the allreduce scope (default Distributed<class>).
        device_dense, device_sparse: accepted; the collectives run on the CPU.
        compression: Compression.none or Compression.fp16.
        sparse_as_dense: reduce tf.IndexedSlices gradients as dense tensors.
        gradient_predivide_factor: Average as a sum scaled by 1/f before and f/size after.
        op: Average or Sum.
        backward_passes_per_step: apply every N calls, on the sum of the N gradients.
        average_aggregated_gradients: divide that sum by N.
        num_groups, groups: accepted (hvdrun fuses every gradient of one type).
        process_set: the ranks to average over (default: every rank).
        scale_local_gradients: divide the gradients of register_local_var() variables by
            size().
    """
    if op not in (Average, Sum):
        raise ValueError("op currently only supports Average and Sum")
    return _tf_distributed_optimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        backward_passes_per_step=backward_passes_per_step, op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="",  # noqa: N802
                                device_sparse="", compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0,
                                op=Average, groups=None, process_set=global_process_set,
                                local_layers=None, scale_local_gradients=True):
    """DistributedOptimizer whose `local_layers` (a Keras layer or a list of them) keep
    their own gradients, divided by size() when scale_local_gradients."""
    import keras

    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    opt = DistributedOptimizer(optimizer, name=name, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """Reduces a Python or NumPy value over the ranks (Average by default); a tensor."""
    return _impl.allreduce(value, name, average, prescale_factor, postscale_factor, op,
                           compression)


def allgather(value, name=None):
    """Every rank's value concatenated along the first dimension; a tensor."""
    return _impl.allgather(value, name)


def broadcast(value, root_rank, name=None):
    """Rank `root_rank`'s value on every rank; a tensor."""
    return _impl.broadcast(value, root_rank, name)


def reducescatter(value, name=None, op=Average):
    """A Python or NumPy value reduced over the ranks (Average by default), this rank's
    slice of the first dimension; a tensor."""
    return _impl.reducescatter(value, name, op)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """Loads a Keras model saved with a DistributedOptimizer (or any optimizer), with its
    optimizer made distributed again. `legacy_opts` (Keras 2's legacy optimizers) must be
    False."""
    import keras

    if legacy_opts:
        raise NotImplementedError("hvdrun.keras.load_model: legacy_opts (Keras 2's legacy "
                                  "optimizers) do not exist in Keras 3")
    return _impl.load_model(keras, lambda opt: DistributedOptimizer(opt, compression=compression),
                            filepath, custom_optimizers, custom_objects)


_ALTERNATIVES = {
    "broadcast_global_variables": "callbacks.BroadcastGlobalVariablesCallback(root_rank), or "
                                  "hvdrun.tensorflow.broadcast_variables(model.variables, 0)",
    "start_timeline": "the TensorFlow profiler",
    "stop_timeline": "the TensorFlow profiler",
}


def unsupported(module, name):
    """The error a missing Horovod name raises from `module`, or None."""
    from hvdrun.tensorflow import HorovodFeatureNotSupported

    if name in _ALTERNATIVES:
        return HorovodFeatureNotSupported(
            f"{module}.{name} is not supported by hvdrun; use {_ALTERNATIVES[name]} instead")
    return None


__all__ = [
    "Average", "Compression", "DistributedOptimizer", "HorovodInternalError",
    "PartialDistributedOptimizer", "ProcessSet", "Sum", "add_process_set",
    "allgather", "allreduce", "broadcast", "callbacks", "ccl_built", "cross_rank",
    "cross_size", "cuda_built", "ddl_built", "global_process_set", "gloo_built",
    "gloo_enabled", "init", "is_initialized", "load_model", "local_rank", "local_size",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "reducescatter",
    "remove_process_set", "rocm_built", "shutdown", "size",
]
