"""Gradient compression for the allreduce (horovod.tensorflow.compression): `none` passes
tensors through, `fp16` reduces floating-point tensors in float16 and casts the result
back to the original type."""
import tensorflow as tf


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to reduce and what decompress() needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the reduced tensor in its original form."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression (the default)."""

    @staticmethod
    def compress(tensor):
        """The tensor itself."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """The tensor itself."""
        return tensor


class FP16Compressor(Compressor):
    """Floating-point tensors travel as float16; others unchanged."""

    @staticmethod
    def compress(tensor):
        """Casts a floating-point tensor to float16."""
        if tensor.dtype.is_floating:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Casts back to the original floating-point type."""
        return tf.cast(tensor, ctx) if ctx.is_floating else tensor


class Compression:
    """The compressors, under Horovod's names."""

    none = NoneCompressor
    fp16 = FP16Compressor
