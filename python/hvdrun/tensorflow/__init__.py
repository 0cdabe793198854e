"""A drop-in for `horovod.tensorflow` on TensorFlow 2: a Horovod TensorFlow program runs
under hvdrun after changing `import horovod.tensorflow as hvd` to
`import hvdrun.tensorflow as hvd`.

Provided: init, shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
cross_size, the ops Average, Sum, Min, Max, Product, allreduce (pre/postscale, compression,
tf.IndexedSlices as Horovod handles them), grouped_allreduce, allgather, grouped_allgather,
broadcast, broadcast_, alltoall, reducescatter, grouped_reducescatter, process sets
(ProcessSet, add_process_set, remove_process_set, process_set= on the collectives),
broadcast_variables, broadcast_object, allgather_object, join,
DistributedGradientTape, PartialDistributedGradientTape, DistributedOptimizer (Keras
optimizers), Compression, elastic (run, TensorFlowKerasState, TensorFlowState,
ObjectState), SyncBatchNormalization (a Keras 3 layer), the *_op queries and the *_built
queries. Gradients are
registered for the collectives. Everything works eagerly and inside tf.function.

Horovod names not provided raise an error naming them and what to use instead (see
docs/tensorflow.md).
"""

import tensorflow as tf

from hvdrun.tensorflow import util
from hvdrun import _error_file, _job, _stacks
from hvdrun._job import HorovodFeatureNotSupported
from hvdrun.tensorflow import _keras_optimizer, mpi_ops
from hvdrun.tensorflow._collectives import (allreduce, grouped_allreduce,
                                            grouped_reducescatter, reducescatter)
from hvdrun.tensorflow._gradients import _GradientReducer
from hvdrun.tensorflow.compression import Compression
from hvdrun.tensorflow.functions import (allgather_object, broadcast_object,
                                         broadcast_variables)
from hvdrun.tensorflow.mpi_ops import (Average, HorovodInternalError, Max, Min, ProcessSet,
                                       Product, Sum, _check_process_set, add_process_set,
                                       allgather, alltoall, broadcast, broadcast_, ccl_built,
                                       cross_rank, cross_size, cuda_built, ddl_built,
                                       global_process_set, gloo_built, gloo_enabled,
                                       grouped_allgather, init,
                                       is_homogeneous, is_initialized, join, local_rank,
                                       local_rank_op, local_size, local_size_op, mpi_built,
                                       mpi_enabled, mpi_threads_supported, nccl_built,
                                       process_set_included_op, rank, rank_op,
                                       remove_process_set, rocm_built, shutdown, size,
                                       size_op)
from hvdrun.tensorflow.util import _executing_eagerly
from hvdrun.tensorflow import elastic  # noqa: F401 (hvd.elastic)

_WHAT = "hvdrun.tensorflow"

# An uncaught exception goes to the rank's error file (TORCHELASTIC_ERROR_FILE), for the
# launcher's failure message and --result-file.
_error_file.install()
# Its stacks and the collectives it waits in, when its agent asks (the stack report).
_stacks.install()

# Horovod's module has it (the collectives' `average=`); still an attribute here now that
# they live in _collectives.py, so that a program calling it runs.
handle_average_backwards_compatibility = mpi_ops.handle_average_backwards_compatibility


# ---- gradients of many variables -------------------------------------------------------

class _DistributedGradientTape:
    """Mixed into a subclass of the wrapped tape's class: gradient() averages the gradients
    over the ranks."""

    def _hvdrun_setup(self, reducer, process_set, scale_local_gradients):
        self._hvdrun_reducer = reducer
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """A source whose gradient stays this rank's own (not reduced)."""
        self._local_sources.add(id(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        """tf.GradientTape.gradient, with the gradients of every source not registered as
        local reduced over the ranks. Same structure as `sources`."""
        flat = tf.nest.flatten(sources)
        grads = tf.nest.flatten(super().gradient(target, sources, output_gradients))
        shared = [i for i, s in enumerate(flat) if id(s) not in self._local_sources]
        reduced = self._hvdrun_reducer([grads[i] for i in shared], use_generic_names)
        for i, g in zip(shared, reduced):
            grads[i] = g
        if self.scale_local_gradients and self._local_sources:
            n = tf.cast(self.process_set.size(), tf.float32)
            for i, s in enumerate(flat):
                g = grads[i]
                if id(s) in self._local_sources and g is not None:
                    if isinstance(g, tf.IndexedSlices):
                        grads[i] = tf.IndexedSlices(g.values / tf.cast(n, g.values.dtype),
                                                    g.indices, g.dense_shape)
                    else:
                        grads[i] = g / tf.cast(n, g.dtype)
        return tf.nest.pack_sequence_as(sources, grads)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """(local, global) lists of (source, gradient) pairs."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, grads):
            (local if id(s) in self._local_sources else shared).append((s, g))
        return local, shared


def _check_grouping(gradient_predivide_factor, op, num_groups, groups):
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0 and groups is None:
        groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    # Grouping decides which gradients share a fused buffer; hvdrun fuses every gradient
    # of one type, which gives the same results.
    return groups


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps a tf.GradientTape so that gradient() returns gradients averaged (op) over the
    ranks; the tape keeps its class (a subclass of it is returned), persistence and
    watched variables. Arguments as Horovod's."""
    _check_process_set(process_set, "DistributedGradientTape")
    groups = _check_grouping(gradient_predivide_factor, op, num_groups, groups)
    cls = type(gradtape.__class__.__name__, (_DistributedGradientTape, gradtape.__class__), {})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # the recording tape and its watched variables
    tape._hvdrun_setup(
        _GradientReducer("DistributedGradientTape", compression, sparse_as_dense, op,
                         gradient_predivide_factor, groups, process_set),
        process_set, scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose `local_layers` keep their own gradients."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        for v in layer.trainable_weights:
            tape.register_local_source(v)
    return tape


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",  # noqa: N802
                         device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """Wraps a Keras optimizer (tf.keras.optimizers / keras.optimizers) so that it averages
    the gradients over the ranks before applying them; see
    hvdrun.tensorflow.keras.DistributedOptimizer. TF1's tf.compat.v1.train optimizers are
    not supported."""
    _check_process_set(process_set, "DistributedOptimizer")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        raise NotImplementedError(
            f"{_WHAT}.DistributedOptimizer: TF1 optimizers (tf.compat.v1.train) are not "
            "supported; use a Keras optimizer (tf.keras.optimizers.SGD, ...) or "
            "DistributedGradientTape")
    groups = _check_grouping(gradient_predivide_factor, op, num_groups, groups)
    # Built by _keras_optimizer.py, below this package: hvdrun._keras, above it, imports
    # hvdrun.tensorflow and is never imported from here.
    return _keras_optimizer.create_distributed_optimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        scale_local_gradients=scale_local_gradients, process_set=process_set)


def broadcast_global_variables(root_rank):
    """TF1: broadcasts every global variable (tf.compat.v1.global_variables()) from
    `root_rank`, in graph mode. Eagerly it raises RuntimeError, as Horovod's does: use
    broadcast_variables(model.variables, root_rank)."""
    if _executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


_ALTERNATIVES = {
    "Adasum": "op=hvd.Average (or hvd.Sum)",
    "start_timeline": "the TensorFlow profiler (tf.profiler.experimental)",
    "stop_timeline": "the TensorFlow profiler (tf.profiler.experimental)",
    "BroadcastGlobalVariablesHook": "broadcast_variables after building the model (TF1 "
                                    "session hooks do not exist in TF2)",
    "broadcast_object_fn": "broadcast_object (eager)",
}


_missing = _job.missing_attribute(_WHAT, "horovod.tensorflow", _ALTERNATIVES)


def __getattr__(name):
    # SyncBatchNormalization is a Keras layer: Keras is imported on first use only.
    if name == "SyncBatchNormalization":
        from hvdrun.tensorflow.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    return _missing(name)


__all__ = [
    "Average", "Compression", "DistributedGradientTape", "DistributedOptimizer",
    "HorovodFeatureNotSupported", "HorovodInternalError", "Max", "Min",
    "PartialDistributedGradientTape", "ProcessSet", "Product", "Sum", "SyncBatchNormalization",
    "add_process_set",
    "allgather", "allgather_object", "allreduce", "alltoall", "broadcast", "broadcast_",
    "broadcast_global_variables", "broadcast_object", "broadcast_variables",
    "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "elastic",
    "global_process_set",
    "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allreduce",
    "grouped_reducescatter", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_rank_op", "local_size",
    "local_size_op", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built",
    "process_set_included_op", "rank", "rank_op", "reducescatter", "remove_process_set",
    "rocm_built", "shutdown", "size", "size_op",
]
