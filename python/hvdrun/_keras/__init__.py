"""What hvdrun.keras and hvdrun.tensorflow.keras share: load_model and the eager helpers,
over hvdrun.tensorflow's ops (Keras 3 with the TensorFlow backend).

The Keras 3 DistributedOptimizer itself is hvdrun.tensorflow's (_keras_optimizer.py), as
hvdrun.tensorflow.DistributedOptimizer builds it: this package sits above hvdrun.tensorflow
and imports it, never the other way round (tests/python/test_imports.py checks that the
package's imports have no cycle).
"""
import tensorflow as tf

from hvdrun.tensorflow._collectives import allreduce as _allreduce
from hvdrun.tensorflow._collectives import reducescatter as _reducescatter
from hvdrun.tensorflow.mpi_ops import allgather as _allgather
from hvdrun.tensorflow.mpi_ops import broadcast as _broadcast


def load_model(keras, wrap_optimizer, filepath, custom_optimizers, custom_objects):
    """keras.models.load_model with every optimizer class (Keras' own and
    `custom_optimizers`) deserialised as its DistributedOptimizer."""
    classes = {}
    pending = list(keras.optimizers.Optimizer.__subclasses__()) + list(custom_optimizers or [])
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "_hvdrun_" in "".join(vars(cls)):  # a distributed class itself
            continue
        classes.setdefault(cls.__name__, cls)

    def wrapped(cls):
        def from_config(_c, config, custom_objects=None):
            return wrap_optimizer(cls.from_config(config))
        return type(cls.__name__, (cls,), {"from_config": classmethod(from_config)})

    objects = {}
    for n, cls in classes.items():
        objects[n] = objects[n.lower()] = wrapped(cls)
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)


def allreduce(value, name, average, prescale_factor, postscale_factor, op, compression):
    """hvd.allreduce of a Python or NumPy value, as a tensor."""
    return _allreduce(tf.constant(value), average=average, name=name,
                      prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                      op=op, compression=compression)


def allgather(value, name):
    """hvd.allgather of a Python or NumPy value, as a tensor."""
    return _allgather(tf.constant(value), name=name)


def broadcast(value, root_rank, name):
    """hvd.broadcast of a Python or NumPy value, as a tensor."""
    return _broadcast(tf.constant(value), root_rank, name=name)


def reducescatter(value, name, op):
    """hvd.reducescatter of a Python or NumPy value, as a tensor."""
    return _reducescatter(tf.constant(value), name=name, op=op)
