"""One side of bench/scatter.sh: alltoall and reducescatter from Python. `hvdrun` (started
by hvdrun) times hvdrun.torch's alltoall and reducescatter (Sum) and, for a process set of
every rank, its allreduce against the whole job's; `horovod` (started by `horovodrun
--gloo`) times Horovod's alltoall and reducescatter (Sum); `torch` times
torch.distributed's gloo all_to_all_single and its reduce_scatter where the backend has
one. Rank 0 prints "result impl=... op=... bytes=... us=..." per size: the median of 5
timed batches.
Usage: hvdrun -np N python3 bench/scatter.py hvdrun|horovod|torch BYTES...
"""
import os
import statistics
import sys
import time

import torch


def timed(fn, barrier, agree):
    for _ in range(2):
        fn()
    barrier()
    t0 = time.perf_counter()
    fn()
    reps = int(agree(max(3, min(2000, int(0.2 / max(time.perf_counter() - t0, 1e-7))))))
    times = []
    for _ in range(5):
        barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t0) / reps)
    return statistics.median(times) * 1e6


def main():
    impl, sizes = sys.argv[1], [int(a) for a in sys.argv[2:]]
    if impl in ("hvdrun", "horovod"):
        if impl == "hvdrun":
            import hvdrun.torch as hvd
        else:
            import horovod.torch as hvd
        hvd.init()
        rank, n = hvd.rank(), hvd.size()
        everyone = hvd.add_process_set(list(range(n))) if n > 1 and os.environ.get(
            "HOROVOD_DYNAMIC_PROCESS_SETS") and impl == "hvdrun" else None
        barrier = hvd.barrier

        def agree(v):
            return hvd.allreduce(torch.tensor([float(v)]), op=hvd.Max).item()
        ops = {"alltoall": lambda t: hvd.alltoall(t),
               "reducescatter": lambda t: hvd.reducescatter(t, op=hvd.Sum)}
        if impl == "hvdrun":
            ops["allreduce"] = lambda t: hvd.allreduce(t, op=hvd.Sum)
        if impl == "hvdrun" and everyone is not None:
            ops["allreduce_in_set"] = lambda t: hvd.allreduce(t, op=hvd.Sum, process_set=everyone)
    elif impl == "torch":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, n = dist.get_rank(), dist.get_world_size()
        barrier = dist.barrier

        def agree(v):
            t = torch.tensor([float(v)])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.item()

        def a2a(t):
            out = torch.empty_like(t)
            dist.all_to_all_single(out, t)
            return out

        def rs(t):
            out = torch.empty(t.numel() // n)
            dist.reduce_scatter(out, list(t.chunk(n)))
            return out
        ops = {"alltoall": a2a, "reducescatter": rs}
    else:
        sys.exit(f"scatter.py: unknown implementation {impl!r} (hvdrun, horovod or torch)")
    for nbytes in sizes:
        t = torch.ones(max(nbytes // 4 // n, 1) * n)
        for name, fn in ops.items():
            try:
                us = timed(lambda: fn(t), barrier, agree)
            except RuntimeError as e:  # a backend without this collective
                if rank == 0:
                    print(f"skipped impl={impl} op={name}: {str(e).splitlines()[0]}", flush=True)
                continue
            if rank == 0:
                print(f"result impl={impl} op={name} np={n} bytes={t.numel() * 4} us={us:.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
