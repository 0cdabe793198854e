"""Gradient compression as Horovod's `horovod.torch.compression`, on torch tensors: the
shared compressors of hvdrun/_compression.py."""
import torch

from hvdrun import _compression
from hvdrun._compression import Compressor, NoneCompressor  # noqa: F401


class FP16Compressor(_compression.FP16Compressor):
    """Reduces floating-point tensors as float16 (half the bytes on the wire); other
    tensors unchanged."""

    _half = torch.float16
    _cast = staticmethod(lambda tensor, dtype: tensor.type(dtype))
    _floating = staticmethod(lambda dtype: dtype.is_floating_point)


class Compression(_compression.Compression):
    """The compression algorithms DistributedOptimizer and allreduce accept."""

    fp16 = FP16Compressor
    """Floating-point tensors reduced as float16."""
