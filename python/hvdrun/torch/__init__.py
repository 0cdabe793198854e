"""A drop-in for the commonly used part of `horovod.torch`: a Horovod PyTorch program
runs under hvdrun after changing `import horovod.torch as hvd` to
`import hvdrun.torch as hvd`.

Provided: init, shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
cross_size, the ops Average, Sum, Min, Max, Product, allreduce(_)(async)(_), grouped
allreduce and allgather, allgather(_async), allgather_object, broadcast(_)(async)(_),
broadcast_object, broadcast_parameters, broadcast_optimizer_state, poll, synchronize,
join, barrier, alltoall(_async), reducescatter(_async), grouped_reducescatter(_async),
process sets, DistributedOptimizer, Compression, the *_built queries, SyncBatchNorm,
sparse_allreduce_async, and the elastic API (hvd.elastic.run, TorchState, ObjectState,
ElasticSampler, HostsUpdatedInterrupt; docs/elastic.md).

Horovod names not provided raise an error naming them and what to use instead (see
docs/python.md). Collectives are matched across ranks by the order they are issued in,
not by name: every rank issues the same collectives in the same order.
"""
from hvdrun import _error_file, _job, _stacks
from hvdrun._job import HorovodFeatureNotSupported
from hvdrun.torch.compression import Compression
from hvdrun.torch.functions import (allgather_object, broadcast_object,
                                    broadcast_optimizer_state, broadcast_parameters)
from hvdrun.torch.mpi_ops import (Average, HorovodInternalError, Max, Min, ProcessSet, Product,
                                  Sum, add_process_set, remove_process_set, start_timeline,
                                  stop_timeline,
                                  allgather, allgather_async, allreduce, allreduce_,
                                  allreduce_async, allreduce_async_, barrier, broadcast,
                                  broadcast_, broadcast_async, broadcast_async_, ccl_built,
                                  cross_rank, cross_size, cuda_built, ddl_built,
                                  generation, global_process_set, gloo_built, gloo_enabled,
                                  grouped_allgather, grouped_allgather_async,
                                  grouped_allreduce, grouped_allreduce_,
                                  grouped_allreduce_async, grouped_allreduce_async_, init,
                                  is_homogeneous, is_initialized, join, local_rank,
                                  local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                                  nccl_built, poll, rank, rocm_built, shutdown, size,
                                  synchronize)
from hvdrun.torch.optimizer import DistributedOptimizer
from hvdrun.torch.scatter_ops import (alltoall, alltoall_async, grouped_reducescatter,
                                      grouped_reducescatter_async, reducescatter,
                                      reducescatter_async)
from hvdrun.torch.sparse import sparse_allreduce_async
from hvdrun.torch.sync_batch_norm import SyncBatchNorm
from hvdrun.torch import elastic  # noqa: E402 (after the names it uses)


_ALTERNATIVES = {
    "Adasum": "op=hvd.Average (or hvd.Sum) with DistributedOptimizer",
    "DistributedAdasumOptimizer": "DistributedOptimizer with op=hvd.Average",
}


__getattr__ = _job.missing_attribute("hvdrun.torch", "horovod.torch", _ALTERNATIVES)

# An uncaught exception goes to the rank's error file (TORCHELASTIC_ERROR_FILE), for the
# launcher's failure message and --result-file.
_error_file.install()
# Its stacks and the collectives it waits in, when its agent asks (the stack report).
_stacks.install()


__all__ = [
    "Average", "Compression", "DistributedOptimizer", "HorovodFeatureNotSupported",
    "HorovodInternalError", "Max", "Min", "ProcessSet", "Product", "Sum", "add_process_set",
    "remove_process_set", "allgather", "allgather_async",
    "alltoall", "alltoall_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "reducescatter", "reducescatter_async",
    "allgather_object", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "ccl_built",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "elastic", "generation",
    "global_process_set", "gloo_built", "gloo_enabled", "grouped_allgather",
    "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "init", "is_homogeneous",
    "is_initialized", "join", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "poll", "rank", "rocm_built", "shutdown", "size",
    "synchronize",
    "SyncBatchNorm", "sparse_allreduce_async", "start_timeline", "stop_timeline",
]
