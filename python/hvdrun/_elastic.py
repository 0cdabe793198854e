"""The framework-neutral part of Horovod's elastic API: the State objects a training loop
commits and restores, the interrupt that tells every rank the hosts changed, and the retry
loop behind `hvd.elastic.run`. A framework module supplies the object broadcast, the rank
query and the reset (shutdown, then init).

What happens in the loop (Horovod's semantics):
- state.sync() broadcasts rank 0's state to everyone before the function (re)starts;
- HorovodInternalError (a collective failed): the last committed state is restored, the
  library is re-initialised, reset callbacks run, the state is synced again;
- HostsUpdatedInterrupt (raised by commit() or check_host_updates() on every rank at the
  same step): the library is re-initialised without restoring; the sync is skipped when
  hosts were only removed.
"""
import functools
import queue
import sys

# What a host update did; several combine with |.
NO_UPDATE = 0
HOSTS_ADDED = 1
HOSTS_REMOVED = 2
RANK_RETIRED = 4  # hvdrun: this rank has no place in the next generation


class HostsUpdatedInterrupt(RuntimeError):
    """The set of hosts in the job changed: every rank raises it at the same commit() or
    check_host_updates(), and `hvd.elastic.run` re-initialises without restoring the
    committed state. `skip_sync` is true when hosts were only removed (the survivors'
    states are already the same)."""

    def __init__(self, skip_sync):
        super().__init__("the job's hosts changed" + (" (removed only)" if skip_sync else ""))
        self.skip_sync = skip_sync


class _HostMessages(queue.Queue):
    """A State's queue of host updates, (timestamp, HOSTS_ADDED | HOSTS_REMOVED). Horovod's
    driver pushes them from a notification thread; hvdrun's agent tells libhvdrun, which
    empty() asks, so a program that polls `state._host_messages.empty()` (as Horovod's own
    elastic tests do) sees the update before its next commit."""

    def __init__(self, state):
        super().__init__()
        self._state = state
        self._told = False

    def poll_agent(self):
        """Puts the agent's pending update, once, stamped after the last one acted on."""
        if self._told:
            return
        placed = agent_host_update() & (HOSTS_ADDED | HOSTS_REMOVED)
        if placed:
            self._told = True
            self.put((self._state._last_updated_timestamp + 1, placed))

    def empty(self):
        self.poll_agent()
        return super().empty()


class State:
    """State kept in memory across resets. Subclasses define save(), restore() and sync().

    Arguments:
        bcast_object: broadcasts a picklable object from rank 0 to every rank.
        get_rank: returns this process's rank.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._last_updated_timestamp = 0
        self._host_messages = _HostMessages(self)
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Adds functions (no arguments) called after every reset, once the library is
        initialised again: to rescale a learning rate to the new size, for example."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by `run` after a reset: drops pending host messages, calls reset(), then
        the registered callbacks in order."""
        self._host_messages = _HostMessages(self)
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Records a host update (`timestamp` increasing, `update_res` HOSTS_ADDED and/or
        HOSTS_REMOVED); the next commit() or check_host_updates() raises
        HostsUpdatedInterrupt on every rank."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """save(), then check_host_updates(). A commit copies the whole state (a model's
        tensors to host memory), so committing every few batches rather than every one
        trades lost steps after a failure against time per batch."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when any rank has recorded a host
        update newer than the last one acted on, or when hvdrun's agent has placed this
        rank in a next generation (in-process elastic recovery, docs/elastic.md). A
        collective: every rank calls it at the same point (rank 0's view is broadcast, so
        all ranks decide alike)."""
        previous = newest = self._last_updated_timestamp
        self._host_messages.poll_agent()
        what = NO_UPDATE
        while not self._host_messages.empty():
            timestamp, update = self._host_messages.get()
            if timestamp > newest:
                newest = timestamp
                what |= update
        previous, newest, what = self._bcast_object((previous, newest, what))
        self._last_updated_timestamp = newest
        if newest > previous:
            raise HostsUpdatedInterrupt(what == HOSTS_REMOVED)

    def save(self):
        """Copies the state to host memory (the point restore() goes back to)."""
        raise NotImplementedError(f"{type(self).__name__}.save()")

    def restore(self):
        """Goes back to the last saved state, dropping changes made since."""
        raise NotImplementedError(f"{type(self).__name__}.restore()")

    def sync(self):
        """Makes every rank's state rank 0's."""
        raise NotImplementedError(f"{type(self).__name__}.sync()")

    def reset(self):
        """Hook called at a reset, before the callbacks and the sync."""


class ObjectState(State):
    """State made of picklable Python objects, given as keyword arguments and kept as
    attributes of the same names (state.epoch, state.batch, ...)."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)


def agent_host_update():
    """The host changes (HOSTS_ADDED | HOSTS_REMOVED) of a next generation hvdrun's agent
    has placed this rank in, or NO_UPDATE; NO_UPDATE too without a control channel."""
    from hvdrun import _lib
    if _lib._lib is None:  # the library was never loaded: no init(), so no channel
        return NO_UPDATE
    return _lib.check(_lib.lib().hvdrun_hosts_updated(), "hvdrun_hosts_updated")


def declare_elastic():
    """Tells hvdrun's agent that this rank runs under the elastic retry loop, so that a
    failure elsewhere may keep this process (nothing without a control channel)."""
    from hvdrun import _lib
    _lib.check(_lib.lib().hvdrun_elastic_declare(), "hvdrun_elastic_declare")


def joining_alone():
    """True while hvdrun runs this process as a job of one because it started it into a
    running elastic job (HVDRUN_JOINING): what the program did before hvd.elastic.run (a
    warm-up step building the optimizer's slots) met no other rank."""
    from hvdrun import _lib
    return _lib.check(_lib.lib().hvdrun_elastic_joining(), "hvdrun_elastic_joining") == 1


def run_fn(func, reset, internal_error):
    """`func(state, ...)` wrapped in the elastic retry loop (see the module's docstring);
    `reset` re-initialises the library, `internal_error` is the framework's
    HorovodInternalError."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except internal_error:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


def bound_object_state(bcast_object, get_rank, module):
    """The ObjectState class of a framework module: `bcast_object` and `get_rank` are the
    module's unless given."""

    class BoundObjectState(ObjectState):
        """State of picklable objects given as keyword arguments (state.epoch, ...), synced
        with the framework's broadcast_object unless `bcast_object` and `get_rank` are
        given."""

        def __init__(self, bcast_object=None, get_rank=None, **kwargs):
            super().__init__(bcast_object=bcast_object or default_bcast,
                             get_rank=get_rank or default_rank, **kwargs)

    default_bcast, default_rank = bcast_object, get_rank
    BoundObjectState.__name__ = BoundObjectState.__qualname__ = "ObjectState"
    BoundObjectState.__module__ = module
    return BoundObjectState


def framework_run(func, what, init, shutdown, internal_error):
    """`hvd.elastic.run` of the framework module `what` ("hvdrun.torch", ...): `func` in
    run_fn's retry loop, where a reset is the module's shutdown(), then init(), then
    telling hvdrun's agent again that this rank runs under the loop. In a generation above
    0 (hvdrun's restart mode replaced every process) rank 0 says once on stderr that the
    state is what the program built, not the last commit. A process hvdrun started into a
    running job, alone until now, joins it first: the running ranks wait for it in their
    init(), and the sync then gives it their state."""

    def reset():
        shutdown()
        if agent_host_update() & RANK_RETIRED:
            sys.exit(0)  # its host left the job (discovery no longer lists it)
        init()
        declare_elastic()

    from hvdrun._lib import HvdrunError
    # Any failed call into libhvdrun (a barrier, a process set) ends the generation for
    # this rank as a failed collective (the framework's HorovodInternalError) does.
    looped = run_fn(func, reset, (internal_error, HvdrunError))

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        from hvdrun import _job
        if _job.is_initialized():
            if joining_alone():
                reset()
            else:
                _note_restart(what)
                declare_elastic()
        return looped(state, *args, **kwargs)

    return wrapper


_noted = False


def _note_restart(what):
    global _noted
    from hvdrun import _job
    if _noted:
        return
    generation = _job.query(what, "generation")
    if generation == 0 or _job.query(what, "rank") != 0:
        return
    _noted = True
    print(f"{what}.elastic: generation {generation}: hvdrun restarted every process after a "
          "lost host or a failed rank, so the elastic state starts from what the program "
          "built, not from the last commit; to resume, load a checkpoint when "
          "hvd.generation() is above 0 (docs/elastic.md)", file=sys.stderr, flush=True)
