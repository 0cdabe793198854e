"""The job as every framework binding sees it: joining and leaving (init, shutdown), the
rank and size queries, what a rank does at exit, and the parts of Horovod's API that do
not depend on the framework (reduction ops, the global process set, the *_built
queries). Framework-neutral (no torch, no TensorFlow); `what` names the calling module in
messages ("hvdrun.tensorflow").

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


# ---- Horovod's framework-neutral API -----------------------------------------------------

# Reduction ops, with Horovod's values (2 is Horovod's Adasum, which hvdrun lacks).
Average = 0
Sum = 1
Min = 3
Max = 4
Product = 5
OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}


def resolve_op(op, average, what):
    """Horovod's resolution of the deprecated `average` flag against `op`: Average by
    default, Sum for average=False; both given, or an op hvdrun lacks, raise."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        return Average if average is None or average else Sum
    if op not in OP_NAMES:
        raise NotImplementedError(
            f"{what}: op {op!r} is not supported; use hvd.Average, hvd.Sum, hvd.Min, hvd.Max "
            "or hvd.Product (Adasum is not available in hvdrun)")
    return op


class _ProcessSet:
    """The only process set hvdrun offers: every rank of the job."""

    process_set_id = 0

    def size(self):
        """Number of ranks in the set: all of them."""
        return query("hvdrun", "size")

    def rank(self):
        """This process's rank in the set: its rank in the job."""
        return query("hvdrun", "rank")

    def included(self):
        """True: every rank belongs to the global set."""
        return True

    def __repr__(self):
        return "ProcessSet(process_set_id=0, ranks=all)"


global_process_set = _ProcessSet()


def check_process_set(process_set, what):
    """Refuses a process set other than the global one, naming `what`."""
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError(
            f"{what}: process sets are not supported; every collective runs over all ranks. "
            "Drop the process_set argument")


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return query("hvdrun", "size") == query("hvdrun", "local_size") * query("hvdrun",
                                                                            "cross_size")


def mpi_built():
    """False: hvdrun has no MPI."""
    return False


def mpi_enabled():
    """False: hvdrun has no MPI."""
    return False


def gloo_built():
    """True: host collectives run on Gloo and shared memory."""
    return True


def gloo_enabled():
    """True: host collectives run on Gloo and shared memory."""
    return True


def rocm_built():
    """False: hvdrun has no ROCm path."""
    return False


def ddl_built():
    """False: hvdrun has no IBM DDL path."""
    return False


def ccl_built():
    """False: hvdrun has no oneCCL path."""
    return False
