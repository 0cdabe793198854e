"""Horovod's elastic API for PyTorch (`horovod.torch.elastic`): `hvd.elastic.run`,
TorchState, ObjectState, ElasticSampler, HostsUpdatedInterrupt. A Horovod elastic program
runs after changing its import line; docs/elastic.md says what survives a failure in each
of hvdrun's elastic modes."""
from hvdrun._elastic import HostsUpdatedInterrupt, State, bound_object_state, framework_run
from hvdrun.torch.elastic.sampler import ElasticSampler
from hvdrun.torch.elastic.state import TorchState
from hvdrun.torch.functions import broadcast_object
from hvdrun.torch.mpi_ops import HorovodInternalError, init, rank, shutdown


ObjectState = bound_object_state(broadcast_object, rank, __name__)


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
    return framework_run(func, "hvdrun.torch", init, shutdown, HorovodInternalError)


__all__ = ["ElasticSampler", "HorovodInternalError", "HostsUpdatedInterrupt", "ObjectState",
           "State", "TorchState", "run"]
