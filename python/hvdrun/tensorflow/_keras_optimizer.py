"""The Keras 3 DistributedOptimizer that hvdrun.tensorflow.DistributedOptimizer builds
(and hvdrun.keras and hvdrun.tensorflow.keras through it), with the TensorFlow backend.
It lives in hvdrun.tensorflow, below hvdrun._keras, so that hvdrun.tensorflow builds it
without importing hvdrun._keras, which imports hvdrun.tensorflow. Keras itself is not
imported here: the optimizer is a subclass of the class of the one it wraps.

Keras 3 optimizers apply gradients in one place, `Optimizer.apply` (apply_gradients and
model.fit's train step both go through it), so the distributed optimizer is the wrapped
optimizer's own class with `apply` reducing the gradients first: averaged over the ranks
(fused by type), then clipped, decayed and applied by Keras as usual. It also answers to
Keras 2's `lr`, an alias of `learning_rate`, as Horovod's examples use it.
"""
import tensorflow as tf

from hvdrun.tensorflow._gradients import _GradientReducer
from hvdrun.tensorflow._keras_backend import _check_backend
from hvdrun.tensorflow.compression import Compression
from hvdrun.tensorflow.mpi_ops import Average, global_process_set


class _DistributedMethods:
    """Mixed into a subclass of the wrapped optimizer's class."""

    def apply(self, grads, trainable_variables=None):
        """Reduces the gradients over the ranks, then applies them as the wrapped optimizer
        does. With backward_passes_per_step N > 1 the gradients of N calls are summed
        locally and reduced and applied on every N-th (divided by N when
        average_aggregated_gradients); the calls between only count in `iterations`."""
        grads = list(grads)
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            with tf.name_scope(self.name):
                self.build(trainable_variables)
            self.built = True
        passes = self._hvdrun_passes
        if passes == 1:
            return super().apply(
                self._hvdrun_reduce(grads, trainable_variables), trainable_variables)
        return self._hvdrun_accumulate(grads, trainable_variables, passes)

    def build(self, variables):
        """Builds the wrapped optimizer, plus the accumulators of backward_passes_per_step."""
        super().build(variables)
        if self._hvdrun_passes > 1:
            self._hvdrun_sums = [self.add_variable_from_reference(v, "hvdrun_accumulated")
                                 for v in variables]
            self._hvdrun_count = self.add_variable((), initializer="zeros", dtype="int64",
                                                   name="hvdrun_passes")

    @property
    def lr(self):
        """`learning_rate` under Keras 2's name, which Keras 3 dropped: hvdrun's alias on
        the distributed optimizer (Keras' own optimizers are left as they are), so that a
        Horovod program's `opt.lr`, `opt.lr = x` and `opt.lr.assign(x)` run unchanged."""
        return self.learning_rate

    @lr.setter
    def lr(self, value):
        self.learning_rate = value

    def register_local_var(self, var):
        """A variable whose gradient stays this rank's own (not reduced; divided by size()
        when scale_local_gradients)."""
        self._hvdrun_local.add(id(var))

    def _hvdrun_reduce(self, grads, variables):
        shared = [i for i, v in enumerate(variables) if id(v) not in self._hvdrun_local]
        reduced = self._hvdrun_reducer([grads[i] for i in shared])
        out = list(grads)
        for i, g in zip(shared, reduced):
            out[i] = g
        if self._hvdrun_scale_local and self._hvdrun_local:
            n = self._hvdrun_reducer.process_set.size()
            for i, v in enumerate(variables):
                if id(v) in self._hvdrun_local and out[i] is not None:
                    out[i] = out[i] / tf.cast(n, out[i].dtype)
        return out

    def _hvdrun_accumulate(self, grads, variables, passes):
        index = {id(v): i for i, v in enumerate(self._trainable_variables)}
        sums = [self._hvdrun_sums[index[id(v)]] for v in variables]
        totals = []
        for g, s in zip(grads, sums):
            if isinstance(g, tf.IndexedSlices):
                g = tf.convert_to_tensor(g)
            totals.append(None if g is None else s + tf.cast(g, s.dtype))
        count = self._hvdrun_count
        count.assign_add(1)
        apply = super().apply  # the wrapped optimizer's (a closure has no zero-argument super)

        def apply_now():
            ready = totals
            if self._hvdrun_average_passes:
                ready = [None if t is None else t / passes for t in totals]
            apply(self._hvdrun_reduce(ready, variables), variables)
            for s in sums:
                s.assign(tf.zeros_like(s))
            return tf.constant(True)

        def keep():
            for t, s in zip(totals, sums):
                if t is not None:
                    s.assign(t)
            self.iterations.assign_add(1)
            return tf.constant(False)

        if tf.executing_eagerly():
            return apply_now() if int(count.numpy()) % passes == 0 else keep()
        return tf.cond(tf.equal(count.value % passes, 0), apply_now, keep)


def create_distributed_optimizer(optimizer, name=None, compression=None, sparse_as_dense=False,
                                 gradient_predivide_factor=1.0, op=None,
                                 backward_passes_per_step=1, average_aggregated_gradients=False,
                                 scale_local_gradients=True, process_set=None):
    """A new optimizer of `optimizer`'s class and configuration (as Horovod builds it) that
    reduces gradients over the ranks before applying them. Its class has the wrapped
    class's name and module, so a model saved with it loads without hvdrun."""
    _check_backend()
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be > 0")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMethods, base), {})
    cls.__module__ = base.__module__
    cls.__qualname__ = base.__qualname__
    opt = cls.from_config(optimizer.get_config())
    opt._hvdrun_reducer = _GradientReducer(
        name or f"Distributed{base.__name__}",
        compression if compression is not None else Compression.none, sparse_as_dense,
        op if op is not None else Average, gradient_predivide_factor, None,
        process_set if process_set is not None else global_process_set)
    opt._hvdrun_passes = backward_passes_per_step
    opt._hvdrun_average_passes = average_aggregated_gradients
    opt._hvdrun_scale_local = scale_local_gradients
    opt._hvdrun_local = set()
    return opt
