"""The job as every framework binding sees it: joining and leaving (init, shutdown), the
rank and size queries, what a rank does at exit, and the parts of Horovod's API that do
not depend on the framework (reduction ops, process sets, the *_built queries).
Framework-neutral (no torch, no TensorFlow); `what` names the calling module in messages
("hvdrun.tensorflow").

A rank that dies of an uncaught exception leaves at once (its traceback on stderr is what
the launcher quotes); at a normal exit it leaves without agreeing with the others, bounded
to 30 s, so a peer that already exited cannot keep it alive.
"""
import atexit
import ctypes
import os
import sys
import threading

from hvdrun import _lib

_state_lock = threading.Lock()
_hooks_installed = False
_failing = False
# Jobs this process has joined: every init() after a shutdown() joins a new one, whose
# members all start it together (object collectives count their calls per job).
_joins = 0


def init(what, comm=None, process_sets=None):
    """Joins the job hvdrun started (idempotent) and adds `process_sets` (ProcessSet objects
    or rank lists, in this order, on every rank; "dynamic" is accepted: see
    add_process_set). `comm` is Horovod's MPI communicator, refused unless None."""
    if comm is not None:
        raise NotImplementedError(
            f"{what}.init(comm=...): MPI communicators and rank subsets are not supported; "
            "call init() with no arguments inside a job started by hvdrun")
    global _joins
    lib = _lib.lib()
    joining = not lib.hvdrun_is_initialized()
    _lib.check(lib.hvdrun_init(), f"{what}.init")
    _joins += joining
    if joining:  # (a second init() keeps the sets this process added)
        _set_members.clear()
        _sets.clear()
    global_process_set.ranks = list(range(query(what, "size")))
    given = [] if process_sets is None or process_sets == "dynamic" else list(process_sets)
    given = [_add_process_set(ps, what, given_to_init=True) for ps in given]
    _install_hooks()
    # As Horovod's init: an entry naming the global set or an earlier entry's ranks is
    # invalidated, and init raises once the job is up and the other entries are added.
    seen = {0}
    for i, ps in enumerate(given):
        if ps.process_set_id in seen:
            ps._invalidate()
            raise ValueError(f"{what}.init: process_sets entry number {i} is a duplicate: "
                             f"{ps} (ranks {ps.ranks} form the global set or an earlier "
                             "entry); give each set once, and not every rank")
        seen.add(ps.process_set_id)


def shutdown(what):
    """Leaves the job (agreed with the other ranks) and releases the communicators."""
    _lib.check(_lib.lib().hvdrun_shutdown(), f"{what}.shutdown")


def may_grow():
    """Whether this job's size may change while this process runs: its agent gave it a
    control channel (hvdrun's elastic mode, docs/elastic.md). What reduces gradients is
    then built with its collectives even at size 1 (a job of one that grows, a process
    alone until it joins a running job), since it runs on once other ranks take part."""
    return bool(os.environ.get("HVDRUN_CONTROL_FD"))


def joins():
    """How many times this process has joined a job (init() after shutdown() counts again):
    what the members of the current job count from together."""
    return _joins


def is_initialized():
    """True between init() and shutdown()."""
    return bool(_lib.lib().hvdrun_is_initialized())


_QUERIES = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
            "generation")


def query(what, name):
    """rank(), size() and the like: `name` is one of _QUERIES or is_homogeneous. Before
    init() raises ValueError, as Horovod does."""
    v = getattr(_lib.lib(), "hvdrun_" + name)()
    if v < 0:
        raise ValueError(f"{what}.{name}() called before init(): call hvd.init() first")
    return v


_QUERY_DOCS = {
    "rank": "This process's rank in [0, size()).",
    "size": "Number of ranks in the job.",
    "local_rank": "Rank among the ranks on this host (use it to pick a GPU).",
    "local_size": "Number of ranks on this host.",
    "cross_rank": "Index of this host among the hosts.",
    "cross_size": "Number of hosts with a rank of this local_rank.",
    "generation": ("The job's generation: 0, or in elastic mode (hvdrun --min-np,\n"
                   "    --host-discovery-script, --reset-limit) the number of restarts so far.\n"
                   "    A program above 0 resumes from its own checkpoint (an hvdrun extension:\n"
                   "    Horovod has no such call)."),
}


def queries(what, module):
    """Horovod's rank and size queries for the binding `what` ("hvdrun.torch"), as functions
    of `module` in the order of _QUERIES: rank, size, local_rank, local_size, cross_rank,
    cross_size, generation. Each raises ValueError naming `what` before init()."""

    def bound(name):
        def fn():
            return query(what, name)

        fn.__name__ = fn.__qualname__ = name
        fn.__module__ = module
        fn.__doc__ = _QUERY_DOCS[name]
        return fn

    return tuple(bound(name) for name in _QUERIES)


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
# Horovod's op values to the C ABI's hvdrun_op.
C_OP = {Average: _lib.AVERAGE, Sum: _lib.SUM, Min: _lib.MIN, Max: _lib.MAX,
        Product: _lib.PRODUCT}


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


class ProcessSet:
    """A subset of the job's ranks whose collectives run among its members only (pass it
    as `process_set=`). Register it on every rank with add_process_set(), or with
    init(process_sets=[...]). One class for every framework binding, as Horovod's."""

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.mpi_comm = None
        try:
            ranks = sorted(int(r) for r in ranks_or_comm)
        except TypeError:
            raise ValueError(f"hvdrun ProcessSet: expected a list of ranks, got "
                             f"{type(ranks_or_comm).__name__} (MPI communicators are not "
                             "supported)") from None
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"hvdrun ProcessSet: ranks {ranks} repeat a rank")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks in the set (None before it is added)."""
        return None if self.process_set_id is None else set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set, -1 outside it (None before it is added)."""
        if self.process_set_id is None:
            return None
        members = set_ranks(self.process_set_id)
        me = query("hvdrun", "rank")
        return members.index(me) if me in members else -1

    def included(self):
        """True when this process belongs to the set (None before it is added)."""
        if self.process_set_id is None:
            return None
        return query("hvdrun", "rank") in set_ranks(self.process_set_id)

    def __str__(self):
        return (f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, "
                f"mpi_comm=None)")

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_set_members = {}  # process set id -> its ranks (a set's ranks never change)
_sets = {}  # process set id -> the ProcessSet registered with it


def process_set_by_id(ps):
    """The ProcessSet registered with id `ps` (a new one naming the set's ranks when this
    process holds none, as for a set added through another binding)."""
    if ps == 0:
        return global_process_set
    found = _sets.get(ps)
    if found is None:
        found = ProcessSet(set_ranks(ps))
        found.process_set_id = ps
        _sets[ps] = found
    return found


def set_ranks(ps):
    """The job ranks of process set `ps` (0: every rank), ascending."""
    if ps == 0:
        return list(range(query("hvdrun", "size")))
    members = _set_members.get(ps)
    if members is None:
        lib = _lib.lib()
        n = lib.hvdrun_process_set_ranks(ps, None, 0)
        if n < 0:
            raise ValueError(f"hvdrun: {_lib.last_error()}")
        buf = (ctypes.c_int * max(n, 1))()
        lib.hvdrun_process_set_ranks(ps, buf, n)
        members = _set_members[ps] = list(buf[:n])
    return members


def set_size(ps):
    """Number of ranks in process set `ps`."""
    return query("hvdrun", "size") if ps == 0 else len(set_ranks(ps))


def set_rank(ps):
    """This rank's rank within process set `ps` (ValueError outside it)."""
    me = query("hvdrun", "rank")
    return me if ps == 0 else set_ranks(ps).index(me)


def check_process_set(process_set, what):
    """The id of `process_set` for the C calls (0: every rank); `what` names the caller in
    errors ("hvdrun.torch.allreduce")."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a ProcessSet, not "
                        f"{type(process_set).__name__}")
    ps = process_set.process_set_id
    if ps is None:
        raise ValueError(f"{what}: {process_set} is not registered: add it on every rank "
                         "with hvd.add_process_set() (or init(process_sets=...))")
    if ps not in _sets:
        set_ranks(ps)  # a set added through another binding, or ValueError for an unknown id
    return ps


def add_process_set(process_set, what="hvdrun"):
    """Registers a process set (a ProcessSet or a list of ranks) on this rank; every rank
    must call it with the same ranks, in the same order of calls. Needs
    HOROVOD_DYNAMIC_PROCESS_SETS=1, as in Horovod (init(process_sets=...) does not).
    Returns the ProcessSet, now with its id."""
    if os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS", "0") in ("", "0", "false", "False"):
        raise ValueError(f"{what}.add_process_set: set HOROVOD_DYNAMIC_PROCESS_SETS=1 "
                         "(hvdrun -x HOROVOD_DYNAMIC_PROCESS_SETS=1) to add process sets after "
                         "init(), or pass them to init(process_sets=[...])")
    return _add_process_set(process_set, what)


def _add_process_set(process_set, what, given_to_init=False):
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    ranks = process_set.ranks
    arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
    r = _lib.lib().hvdrun_add_process_set(arr, len(ranks))
    if r == _lib.DUPLICATE_SET and given_to_init:
        # As Horovod's init(process_sets=...): the object names the set those ranks form
        # already (every rank: the global set); init() then tells a repeat in its list.
        same = [i for i, s in _sets.items() if s.ranks == ranks]  # (ranks are sorted)
        if same or len(ranks) == query(what, "size"):
            process_set.process_set_id = same[0] if same else 0
            return process_set
    if r == _lib.DUPLICATE_SET:
        raise ValueError(f"{what}.add_process_set: attempted to add a duplicate process "
                         f"set: {_lib.last_error()}")
    if r < 0:
        raise _lib.HvdrunError(f"{what}.add_process_set: {_lib.last_error()}")
    process_set.process_set_id = r
    _set_members[r] = list(ranks)
    _sets[r] = process_set
    return process_set


def remove_process_set(process_set, what="hvdrun"):
    """Removes a process set on every rank (a collective call); True when it existed."""
    ps = process_set.process_set_id
    if ps is None or ps == 0:
        return False
    r = _lib.lib().hvdrun_remove_process_set(ps)
    if r < 0:
        raise _lib.HvdrunError(f"{what}.remove_process_set: {_lib.last_error()}")
    _set_members.pop(ps, None)
    _sets.pop(ps, None)
    process_set._invalidate()
    return r == 1


def is_homogeneous():
    """True when every host runs the same number of ranks; every rank gets the same answer
    (the library agrees it when the ranks check in, from every host's rank count)."""
    return query("hvdrun", "is_homogeneous") == 1


def mpi_built():
    """False: hvdrun has no MPI."""
    return False


def mpi_enabled():
    """False: hvdrun has no MPI."""
    return False


def gloo_built():
    """True, as in Horovod's Gloo mode: host collectives run without MPI (shared memory,
    the leaders' frame mesh; Gloo with HVDRUN_HOST_PATH=gloo)."""
    return True


def gloo_enabled():
    """True, as in Horovod's Gloo mode: host collectives run without MPI (shared memory,
    the leaders' frame mesh; Gloo with HVDRUN_HOST_PATH=gloo)."""
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


class HorovodFeatureNotSupported(NotImplementedError, AttributeError):
    """A part of Horovod's API that hvdrun does not provide. Also an AttributeError, so
    hasattr() reports the name as missing."""


def missing_attribute(module, origin, alternatives):
    """A module-level __getattr__ for `module` (standing in for Horovod's `origin`): a name
    in `alternatives` raises HorovodFeatureNotSupported saying what to use instead, any
    other name the usual AttributeError."""

    def __getattr__(name):
        if name in alternatives:
            raise HorovodFeatureNotSupported(
                f"{module}.{name} (from {origin}) is not supported by hvdrun; use "
                f"{alternatives[name]} instead")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
