"""Gradient compression for the allreduce (horovod.tensorflow.compression), on
TensorFlow tensors: the shared compressors of hvdrun/_compression.py."""
import tensorflow as tf

from hvdrun import _compression
from hvdrun._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(_compression.FP16Compressor):
    """Floating-point tensors travel as float16; others unchanged."""

    _half = tf.float16
    _cast = staticmethod(tf.cast)
    _floating = staticmethod(lambda dtype: dtype.is_floating)


class Compression(_compression.Compression):
    """The compressors, under Horovod's names."""

    fp16 = FP16Compressor
