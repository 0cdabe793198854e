"""SyncBatchNormalization (Horovod's `hvd.SyncBatchNormalization`) for Keras 3 with the
TensorFlow backend: Keras' BatchNormalization whose batch statistics, in training, are
those of every rank's batch together. Each rank sums its inputs, their squares and their
count over the reduction axes; one grouped allreduce (Sum) adds them up over the ranks,
and the mean and variance follow from the totals, so ranks may hold batches of different
sizes. The allreduce has a gradient, so the layer trains as it does alone. Inference
uses the moving statistics, as BatchNormalization does."""
import keras
import tensorflow as tf

from hvdrun.tensorflow._collectives import grouped_allreduce
from hvdrun.tensorflow._keras_backend import _check_backend
from hvdrun.tensorflow.mpi_ops import Sum, size


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization with the batch statistics taken over every rank's
    batch. Arguments as BatchNormalization's."""

    def __init__(self, *args, **kwargs):
        _check_backend()  # the statistics are reduced with TensorFlow ops
        super().__init__(*args, **kwargs)

    def _moments(self, inputs, mask):
        if size() == 1:
            return super()._moments(inputs, mask)
        axes = self._reduction_axes
        if mask is None:
            weights = tf.ones_like(inputs)
        else:
            # As Keras: a position counts when its mask entry is true (non-zero).
            weights = tf.broadcast_to(
                tf.cast(tf.expand_dims(tf.cast(mask, tf.bool), -1), inputs.dtype),
                tf.shape(inputs))
        local = [tf.reduce_sum(inputs * weights, axes),
                 tf.reduce_sum(tf.square(inputs) * weights, axes),
                 tf.reduce_sum(weights, axes)]
        total, squares, count = grouped_allreduce(local, op=Sum)
        count = tf.maximum(count, keras.backend.epsilon())
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        return mean, variance
