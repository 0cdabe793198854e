"""Horovod's elastic API for PyTorch (`horovod.torch.elastic`): `hvd.elastic.run`,
TorchState, ObjectState, ElasticSampler, HostsUpdatedInterrupt. A Horovod elastic program
runs after changing its import line; docs/elastic.md says what survives a failure in each
of hvdrun's elastic modes."""
import functools
import sys

from hvdrun._elastic import HostsUpdatedInterrupt, State, declare_elastic, run_fn
from hvdrun._elastic import ObjectState as _ObjectState
from hvdrun.torch.elastic.sampler import ElasticSampler
from hvdrun.torch.elastic.state import TorchState
from hvdrun.torch.functions import broadcast_object
from hvdrun.torch.mpi_ops import (HorovodInternalError, generation, init, is_initialized, rank,
                                  shutdown)


class ObjectState(_ObjectState):
    """State of picklable objects given as keyword arguments (state.epoch, ...), synced with
    hvdrun.torch.broadcast_object unless `bcast_object` and `get_rank` are given."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object or broadcast_object,
                         get_rank=get_rank or rank, **kwargs)


def _reset():
    shutdown()
    init()
    declare_elastic()


def run(func):
    """Decorates `func(state, ...)`, a training function whose first argument is a State:
    the state is synced from rank 0 before it runs; a failed collective
    (HorovodInternalError) restores the last commit, re-initialises hvdrun.torch
    (shutdown(), init()) and runs `func` again; HostsUpdatedInterrupt does the same without
    the restore. `func` must not be a collective itself: ranks that join would meet it
    while the others sync.

    In a generation above 0 (hvdrun's restart mode replaced every process after a lost
    host or a failed rank) rank 0 says once on stderr that the state is what the program
    built, not the last commit."""
    looped = run_fn(func, _reset, HorovodInternalError)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        _note_restart()
        if is_initialized():
            declare_elastic()
        return looped(state, *args, **kwargs)

    return wrapper


_noted = False


def _note_restart():
    global _noted
    if _noted or not is_initialized() or generation() == 0 or rank() != 0:
        return
    _noted = True
    print(f"hvdrun.torch.elastic: generation {generation()}: hvdrun restarted every process "
          "after a lost host or a failed rank, so the elastic state starts from what the "
          "program built, not from the last commit; to resume, load a checkpoint when "
          "hvd.generation() is above 0 (docs/elastic.md)", file=sys.stderr, flush=True)


__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
           "State", "TorchState", "run"]
