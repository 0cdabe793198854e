"""New output tensors for host collectives, with large ones drawn from a small pool.

A collective that returns a new tensor (hvd.allreduce) needs fresh memory each call. Below a
few tens of MiB the C allocator reuses what the last result freed, but a larger block is a
new mapping every time: each page then faults in, and the kernel zeroes it, as the result is
written, which made a 64 MiB allreduce from Python cost twice what the library needs for
the reduction itself. So a large output is a view of a pooled anonymous mapping instead.

A pooled mapping goes back to the pool when the last tensor that shares its memory is gone,
not merely the one handed out: the tensor's storage (torch.frombuffer) holds a reference to
the mapping for as long as any view of it lives, so a mapping whose only holders are the
pool and the check itself is free. The pool holds at most POOL_BYTES, most recently used
kept; shutdown() empties it. Such a tensor's storage cannot grow (resize_ to a larger size
raises), which a collective's result never needs.
"""
import mmap
import sys
import threading

import torch

POOLED_FROM = 16 << 20  # bytes: smaller outputs come from torch's allocator
POOL_BYTES = 256 << 20  # most bytes of mappings the pool keeps, in use or free

_lock = threading.Lock()
_pool = []  # [mapping, bytes] entries, least recently handed out first
_held = 0


def _holders(entry):
    return sys.getrefcount(entry[0])


# What _holders() counts for a mapping that only the pool holds (the entry and the call).
_FREE = _holders([object(), 0])


def empty(like):
    """An uninitialised contiguous tensor with `like`'s shape and dtype on the CPU: from the
    pool when it is large (`like` must be a CPU tensor)."""
    numel = like.numel()
    nbytes = numel * like.element_size()
    if nbytes < POOLED_FROM:
        return torch.empty_like(like, memory_format=torch.contiguous_format)
    return pooled(like.dtype, like.shape, numel, nbytes)


def pooled(dtype, shape, numel, nbytes):
    """A tensor of `dtype` and `shape` (`numel` elements, `nbytes` bytes) over a free pooled
    mapping of exactly that size, or a new one."""
    global _held
    with _lock:
        for i, entry in enumerate(_pool):
            if entry[1] == nbytes and _holders(entry) == _FREE:
                del _pool[i]
                _pool.append(entry)
                return torch.frombuffer(entry[0], dtype=dtype, count=numel).view(shape)
        mapping = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
        if nbytes <= POOL_BYTES:
            while _pool and _held + nbytes > POOL_BYTES:
                _held -= _pool.pop(0)[1]  # a tensor still using it keeps it alive
            _pool.append([mapping, nbytes])
            _held += nbytes
        return torch.frombuffer(mapping, dtype=dtype, count=numel).view(shape)


def clear():
    """Forgets every pooled mapping (each is unmapped once no tensor uses it)."""
    global _held
    with _lock:
        _pool.clear()
        _held = 0


def pooled_count():
    """(mappings in the pool, of which free): for tests."""
    with _lock:
        return len(_pool), sum(1 for e in _pool if _holders(e) == _FREE)
