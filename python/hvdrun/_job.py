"""The job as every framework binding sees it: joining and leaving (init, shutdown), the
rank and size queries, and what a rank does at exit. Framework-neutral (no torch, no
TensorFlow); `what` names the calling module in messages ("hvdrun.tensorflow").

A rank that dies of an uncaught exception leaves at once (its traceback on stderr is what
the launcher quotes); at a normal exit it leaves without agreeing with the others, bounded
to 30 s, so a peer that already exited cannot keep it alive.
"""
import atexit
import sys
import threading

from hvdrun import _lib

_state_lock = threading.Lock()
_hooks_installed = False
_failing = False


def init(what, comm=None, process_sets=None):
    """Joins the job hvdrun started (idempotent). `comm` and `process_sets` are Horovod's
    arguments, refused unless None."""
    if comm is not None:
        raise NotImplementedError(
            f"{what}.init(comm=...): MPI communicators and rank subsets are not supported; "
            "call init() with no arguments inside a job started by hvdrun")
    if process_sets is not None:
        raise NotImplementedError(
            f"{what}.init(process_sets=...): process sets are not supported; call init() "
            "without process_sets (every collective runs over all ranks)")
    lib = _lib.lib()
    _lib.check(lib.hvdrun_init(), f"{what}.init")
    _install_hooks()


def shutdown(what):
    """Leaves the job (agreed with the other ranks) and releases the communicators."""
    _lib.check(_lib.lib().hvdrun_shutdown(), f"{what}.shutdown")


def is_initialized():
    """True between init() and shutdown()."""
    return bool(_lib.lib().hvdrun_is_initialized())


_QUERIES = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")


def query(what, name):
    """rank(), size() and the like: `name` is one of _QUERIES. Before init() raises
    ValueError, as Horovod does."""
    v = getattr(_lib.lib(), "hvdrun_" + name)()
    if v < 0:
        raise ValueError(f"{what}.{name}() called before init(): call hvd.init() first")
    return v


def _install_hooks():
    global _hooks_installed
    with _state_lock:
        if _hooks_installed:
            return
        atexit.register(_leave_at_exit)
        previous = sys.excepthook

        def hook(*args):
            global _failing
            _failing = True
            previous(*args)

        sys.excepthook = hook
        _hooks_installed = True


def _leave_at_exit():
    if _failing or _lib._lib is None:
        return
    lib = _lib.lib()
    if not lib.hvdrun_is_initialized():
        return
    t = threading.Thread(target=lib.hvdrun_leave, name="hvdrun-leave", daemon=True)
    t.start()
    t.join(30.0)
    if t.is_alive():
        print("hvdrun: leaving the job did not finish within 30 s at exit (a peer rank "
              "probably exited); exiting without it", file=sys.stderr)
