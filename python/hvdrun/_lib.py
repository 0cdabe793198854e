"""libhvdrun.so through ctypes: finding the library, declaring every function's
signature, and turning a failed call into an exception carrying hvdrun_last_error().

The library is loaded on first use, not at import, so `import hvdrun` works on a
machine without it (for example to call hvdrun.run, which only needs the launcher).
"""
import ctypes
import os
import threading

from hvdrun import _safe_path

ABI_REQUIRED = 9

# Element types and reductions of runtime/include/hvdrun/hvdrun_c.h; the values are stable.
INT32, INT64, FLOAT32, FLOAT64, FLOAT16, BFLOAT16, UINT8 = range(7)
SUM, AVERAGE, MIN, MAX, PRODUCT = range(5)
# hvdrun_kind, and hvdrun_submit's answers for a name still in flight and for arguments
# this rank got wrong.
KIND_ALLREDUCE, KIND_BROADCAST, KIND_ALLGATHER, KIND_ALLTOALL, KIND_REDUCESCATTER = range(5)
DUPLICATE_NAME = -2
DUPLICATE_SET = -3
INVALID_ARGUMENT = -4
# hvdrun_hosts_updated's bits.
HOSTS_ADDED = 1
HOSTS_REMOVED = 2
RANK_RETIRED = 4

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None


class HvdrunError(RuntimeError):
    """A collective or a call into libhvdrun failed; the message is the library's."""


class HorovodInternalError(HvdrunError):
    """A collective failed (a disagreement between ranks, a lost peer, the end of an
    elastic generation): what Horovod raises then, under Horovod's name. hvd.elastic.run
    restores the last commit on it."""


# Their public names, as tracebacks print them: hvdrun.HvdrunError and
# hvdrun.HorovodInternalError (hvdrun/__init__.py exports both).
HvdrunError.__module__ = HorovodInternalError.__module__ = "hvdrun"


_c_int, _c_size, _vp, _handle = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_longlong


# hvdrun_submit_then's callback: void (*)(void* arg, long long sequence).
THEN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_longlong)


class Collective(ctypes.Structure):
    """hvdrun_collective of hvdrun_c.h (ABI version 7)."""
    _fields_ = [
        ("kind", ctypes.c_int),
        ("send", ctypes.c_void_p),
        ("recv", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("op", ctypes.c_int),
        ("root", ctypes.c_int),
        ("device", ctypes.c_int),
        ("cuda_stream", ctypes.c_void_p),
        ("name", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_longlong)),
        ("ndim", ctypes.c_int),
        ("type_name", ctypes.c_char_p),
        ("prescale", ctypes.c_double),
        ("postscale", ctypes.c_double),
        ("splits", ctypes.POINTER(ctypes.c_longlong)),
        ("received_splits", ctypes.POINTER(ctypes.c_longlong)),
        ("recv_count", ctypes.c_size_t),
        ("process_set", ctypes.c_int),
        ("caller_scales", ctypes.c_int),
    ]


# name: (restype, argtypes)
_SIGNATURES = {
    "hvdrun_init": (_c_int, []),
    "hvdrun_rank": (_c_int, []),
    "hvdrun_size": (_c_int, []),
    "hvdrun_local_rank": (_c_int, []),
    "hvdrun_local_size": (_c_int, []),
    "hvdrun_cross_rank": (_c_int, []),
    "hvdrun_cross_size": (_c_int, []),
    "hvdrun_is_homogeneous": (_c_int, []),
    "hvdrun_allreduce": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int]),
    "hvdrun_broadcast": (_c_int, [_vp, _c_size, _c_int, _c_int]),
    "hvdrun_allgather": (_c_int, [_vp, _vp, _c_size, _c_int]),
    "hvdrun_barrier": (_c_int, []),
    "hvdrun_shutdown": (_c_int, []),
    "hvdrun_abi_version": (_c_int, []),
    "hvdrun_version": (ctypes.c_char_p, []),
    "hvdrun_is_initialized": (_c_int, []),
    "hvdrun_generation": (_c_int, []),
    "hvdrun_elastic_declare": (_c_int, []),
    "hvdrun_hosts_updated": (_c_int, []),
    "hvdrun_elastic_joining": (_c_int, []),
    "hvdrun_nccl_available": (_c_int, []),
    "hvdrun_nccl_status": (ctypes.c_char_p, []),
    "hvdrun_allreduce_async": (_handle, [_vp, _vp, _c_size, _c_int, _c_int]),
    "hvdrun_broadcast_async": (_handle, [_vp, _c_size, _c_int, _c_int]),
    "hvdrun_allgather_async": (_handle, [_vp, _vp, _c_size, _c_int]),
    "hvdrun_barrier_async": (_handle, []),
    "hvdrun_allreduce_device_async": (_handle, [_vp, _vp, _c_size, _c_int, _c_int, _vp]),
    "hvdrun_broadcast_device_async": (_handle, [_vp, _c_size, _c_int, _c_int, _vp]),
    "hvdrun_allgather_device_async": (_handle, [_vp, _vp, _c_size, _c_int, _vp]),
    "hvdrun_allreduce_device": (_c_int, [_vp, _vp, _c_size, _c_int, _c_int, _vp]),
    "hvdrun_broadcast_device": (_c_int, [_vp, _c_size, _c_int, _c_int, _vp]),
    "hvdrun_allgather_device": (_c_int, [_vp, _vp, _c_size, _c_int, _vp]),
    "hvdrun_poll": (_c_int, [_handle]),
    "hvdrun_wait": (_c_int, [_handle]),
    "hvdrun_pending": (ctypes.c_longlong, []),
    "hvdrun_join": (_c_int, []),
    "hvdrun_last_error": (ctypes.c_char_p, []),
    "hvdrun_submit": (_handle, [ctypes.POINTER(Collective), _c_size]),
    "hvdrun_run": (_c_int, [ctypes.POINTER(Collective), _c_size]),
    "hvdrun_submit_then": (_handle, [ctypes.POINTER(Collective), _c_size, _vp, _vp]),
    "hvdrun_sequence": (ctypes.c_longlong, [_handle]),
    "hvdrun_leave": (_c_int, []),
    "hvdrun_add_process_set": (_c_int, [ctypes.POINTER(ctypes.c_int), _c_int]),
    "hvdrun_reducescatter_rows": (ctypes.c_longlong, [ctypes.c_longlong, _c_int]),
    "hvdrun_remove_process_set": (_c_int, [_c_int]),
    "hvdrun_process_set_ranks": (_c_int, [_c_int, ctypes.POINTER(ctypes.c_int), _c_int]),
    "hvdrun_start_timeline": (_c_int, [ctypes.c_char_p, _c_int]),
    "hvdrun_stop_timeline": (_c_int, []),
}


def _candidates():
    env = os.environ.get("HVDRUN_LIBRARY")
    if env:
        return [("HVDRUN_LIBRARY", env)]
    return [("the hvdrun package", os.path.join(_HERE, "lib", "libhvdrun.so.0"))]


def _not_found(path, source):
    return HvdrunError(
        f"hvdrun: libhvdrun.so not found at {path} (from {source}). Install the package "
        "with `pip install <hvdrun checkout>`, or point HVDRUN_LIBRARY at a built "
        "libhvdrun.so (for example build/runtime/libhvdrun.so)")


def _checked(path):
    """HVDRUN_LIBRARY's path, once it is known that no other user can change it (a bare
    name is the dynamic loader's to find)."""
    if os.sep not in path:
        return path
    try:
        real = _safe_path.loadable_path(path)
    except _safe_path.UnsafePath as e:
        raise HvdrunError(f"hvdrun: HVDRUN_LIBRARY={path}: {e}; point it at a libhvdrun.so "
                          "in a directory only you (or root) can change") from None
    if real is None:
        raise _not_found(path, "HVDRUN_LIBRARY")
    return real


def _load():
    (source, path), = _candidates()
    if source == "HVDRUN_LIBRARY":
        path = _checked(path)
    elif not os.path.exists(path):
        raise _not_found(path, source)
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise HvdrunError(f"hvdrun: cannot load {path} (from {source}): {e}") from None
    if not hasattr(lib, "hvdrun_abi_version"):
        raise HvdrunError(
            f"hvdrun: {path} implements ABI version 1, this package needs version "
            f"{ABI_REQUIRED} or later (negotiated collectives): rebuild or reinstall libhvdrun")
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise HvdrunError(f"hvdrun: {path} lacks {name}: rebuild or reinstall "
                              "libhvdrun") from None
        fn.restype = restype
        fn.argtypes = argtypes
    abi = lib.hvdrun_abi_version()
    if abi < ABI_REQUIRED:
        raise HvdrunError(
            f"hvdrun: {path} implements ABI version {abi}, this package needs version "
            f"{ABI_REQUIRED} or later: rebuild or reinstall libhvdrun")
    return lib


def lib():
    """The loaded library (loading it on first call); raises HvdrunError saying how to
    fix a missing or too old library."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib


def raw(name, restype=ctypes.c_int):
    """A new function object for `name` with no argtypes: a hot path that passes ctypes
    objects built once (byref() of a structure, c_size_t) spares ctypes converting each
    argument on every call. The caller must pass exactly the C types."""
    fn = lib()[name]
    fn.restype = restype
    return fn


def last_error(default="unknown error"):
    """hvdrun_last_error() of this thread, decoded, without the library's own "hvdrun: "
    prefix: every caller puts its own name first ("hvdrun.torch.allreduce: ..."), and a
    message says where it comes from once."""
    msg = lib().hvdrun_last_error()
    text = msg.decode(errors="replace") if msg else default
    return text[len("hvdrun: "):] if text.startswith("hvdrun: ") else text


def check(rc, what, error=HvdrunError):
    """Raises `error` (HvdrunError; HorovodInternalError for a collective) naming `what`
    when a C call returned a negative value."""
    if rc < 0:
        raise error(f"{what} failed: {last_error()}")
    return rc
