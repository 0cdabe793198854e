"""The helper of horovod.tensorflow.util that programs and Horovod's tests call."""
import tensorflow as tf


def _executing_eagerly():
    """True outside a graph (TF2's default), False while one is being built."""
    return tf.executing_eagerly()
