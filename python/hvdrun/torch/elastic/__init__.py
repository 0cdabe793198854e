"""Horovod's elastic API for PyTorch (`horovod.torch.elastic`): `hvd.elastic.run`,
TorchState, ObjectState, ElasticSampler, HostsUpdatedInterrupt. A Horovod elastic program
runs after changing its import line; docs/elastic.md says what survives a failure in each
of hvdrun's elastic modes."""
from hvdrun._elastic import HostsUpdatedInterrupt, State, run_fn
from hvdrun._elastic import ObjectState as _ObjectState
from hvdrun.torch.elastic.sampler import ElasticSampler
from hvdrun.torch.elastic.state import TorchState
from hvdrun.torch.functions import broadcast_object
from hvdrun.torch.mpi_ops import HorovodInternalError, init, rank, shutdown


class ObjectState(_ObjectState):
    """State of picklable objects given as keyword arguments (state.epoch, ...), synced with
    hvdrun.torch.broadcast_object unless `bcast_object` and `get_rank` are given."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object or broadcast_object,
                         get_rank=get_rank or rank, **kwargs)


def _reset():
    shutdown()
    init()


def run(func):
    """Decorates `func(state, ...)`, a training function whose first argument is a State:
    the state is synced from rank 0 before it runs; a failed collective
    (HorovodInternalError) restores the last commit, re-initialises hvdrun.torch
    (shutdown(), init()) and runs `func` again; HostsUpdatedInterrupt does the same without
    the restore. `func` must not be a collective itself: ranks that join would meet it
    while the others sync."""
    return run_fn(func, _reset, HorovodInternalError)


__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
           "State", "TorchState", "run"]
