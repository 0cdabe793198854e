"""The reduction of a list of gradients over the ranks (Horovod's
_make_allreduce_grads_fn): _GradientReducer, which DistributedGradientTape and the Keras
DistributedOptimizer of _keras_optimizer.py share, so that both paths reduce alike."""
import tensorflow as tf

from hvdrun import _job
from hvdrun.tensorflow._collectives import grouped_allreduce
from hvdrun.tensorflow.mpi_ops import Average, Sum, global_process_set

_WHAT = "hvdrun.tensorflow"


def _may_grow():
    """_job.may_grow(): a graph traced at size 1 is then built with its collectives, since
    it runs on once ranks join (without them a joining rank's reductions would meet
    nothing)."""
    return _job.may_grow()


class _GradientReducer:
    """Averages (or sums) a list of gradients over the ranks, as Horovod's
    _make_allreduce_grads_fn: dense gradients fused by type, IndexedSlices gathered (or
    made dense with sparse_as_dense), None kept. Eagerly it runs as one tf.function per
    list of shapes, so every collective is submitted at once."""

    def __init__(self, name, compression, sparse_as_dense, op, gradient_predivide_factor,
                 groups, process_set=global_process_set):
        if op not in (Average, Sum):
            raise NotImplementedError(
                f"{_WHAT}: gradients are reduced with Average or Sum, not {op!r}")
        self.name = name
        self.compression = compression
        self.sparse_as_dense = sparse_as_dense
        self.op = op
        # Horovod splits Average around the sum: 1/f before, f after (and 1/size in the op).
        self.prescale = 1.0 / gradient_predivide_factor if op == Average else 1.0
        self.postscale = gradient_predivide_factor if op == Average else 1.0
        self.groups = groups
        self.process_set = process_set
        self._graph_fn = None

    def _reduce(self, grads, use_generic_names=False):
        with tf.name_scope(self.name + "_Allreduce"):
            if self.sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                         for g in grads]
            present = [i for i, g in enumerate(grads) if g is not None]
            out = list(grads)
            # As Horovod: a rank outside the process set keeps its own gradients.
            if (not present or not self.process_set.included()
                    or (self.process_set.size() == 1 and not _may_grow())):
                return out
            reduced = grouped_allreduce(
                [grads[i] for i in present], compression=self.compression, op=self.op,
                prescale_factor=self.prescale, postscale_factor=self.postscale,
                process_set=self.process_set,
                name="grads" if use_generic_names else None,
                ignore_name_scope=use_generic_names)
            for i, r in zip(present, reduced):
                out[i] = r
            return out

    def __call__(self, grads, use_generic_names=False):
        if not tf.executing_eagerly():
            return self._reduce(grads, use_generic_names)
        if self._graph_fn is None:
            self._graph_fn = tf.function(self._reduce, autograph=False)
        return self._graph_fn(grads, use_generic_names)
