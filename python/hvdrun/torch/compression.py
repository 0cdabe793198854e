"""Gradient compression as Horovod's `horovod.torch.compression`: a compressor turns a
tensor into the tensor that is reduced plus a context, and back."""
import torch


class Compressor:
    """Interface for compressing and decompressing a tensor."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to reduce and the context decompress() needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the reduced tensor restored with the context from compress()."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression (the default)."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor unchanged."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor unchanged."""
        return tensor


class FP16Compressor(Compressor):
    """Reduces floating-point tensors as float16 (half the bytes on the wire); other
    tensors unchanged."""

    @staticmethod
    def compress(tensor):
        """Casts a floating-point tensor to float16; the context is its dtype."""
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Casts back to the dtype compress() saw."""
        if ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.type(ctx)
        return tensor


class Compression:
    """The compression algorithms DistributedOptimizer and allreduce accept."""

    none = NoneCompressor
    """No compression (the default)."""

    fp16 = FP16Compressor
    """Floating-point tensors reduced as float16."""
