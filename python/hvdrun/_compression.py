"""Gradient compression as Horovod's `horovod.<framework>.compression`, once for every
framework binding: a compressor turns a tensor into the tensor that is reduced plus a
context, and back. `fp16` reduces floating-point tensors as float16 (half the bytes on
the wire) and casts the result back; each binding names its framework's float16, how it
casts and what counts as floating point."""


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
    """Reduces floating-point tensors as float16; other tensors unchanged. A binding
    subclasses it with its framework's `_half` type, `_cast(tensor, dtype)` and
    `_floating(dtype)`."""

    _half = None

    @staticmethod
    def _cast(tensor, dtype):
        raise NotImplementedError

    @staticmethod
    def _floating(dtype):
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        """Casts a floating-point tensor to float16; the context is its type."""
        if cls._floating(tensor.dtype):
            return cls._cast(tensor, cls._half), tensor.dtype
        return tensor, tensor.dtype

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts back to the type compress() saw."""
        if cls._floating(ctx) and tensor.dtype != ctx:
            return cls._cast(tensor, ctx)
        return tensor


class Compression:
    """The compressors under Horovod's names; a binding sets `fp16` to its own."""

    none = NoneCompressor
    """No compression (the default)."""

    fp16 = FP16Compressor
    """Floating-point tensors reduced as float16."""
