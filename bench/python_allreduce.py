"""One side of bench/python_allreduce.sh: float32 Sum allreduce from Python. `hvdrun` times
hvdrun.torch's hvd.allreduce (a new output tensor per call, as a program writes it), started
by hvdrun; `horovod` the same program on Horovod's horovod.torch, started by `horovodrun
--gloo`; `torch` times torch.distributed's gloo all_reduce (in place, its only form), started
by hvdrun. Rank 0 prints "result impl=… bytes=… us=…" per size: the median of 5 timed
batches, each about 0.2 s of calls after a warm-up. BENCH_PRESCALE=F (hvdrun, horovod) passes
prescale_factor=F and postscale_factor=1/F with every call: the scale factors' cost.
Usage: hvdrun -np N python3 bench/python_allreduce.py hvdrun|torch BYTES...
       horovodrun --gloo -np N python3 bench/python_allreduce.py horovod BYTES...
"""
import os
import statistics
import sys
import time

import torch


def main():
    impl, sizes = sys.argv[1], [int(a) for a in sys.argv[2:]]
    if impl in ("hvdrun", "horovod"):
        if impl == "hvdrun":
            import hvdrun.torch as hvd
        else:
            import horovod.torch as hvd
        hvd.init()
        rank = hvd.rank()

        scale = float(os.environ.get("BENCH_PRESCALE", "1"))

        def op(t):
            if scale != 1.0:
                return hvd.allreduce(t, op=hvd.Sum, prescale_factor=scale,
                                     postscale_factor=1.0 / scale)
            return hvd.allreduce(t, op=hvd.Sum)

        def agree_max(t):
            return hvd.allreduce(t, op=hvd.Max)

        def barrier():
            hvd.barrier()
    elif impl == "torch":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()

        def op(t):
            dist.all_reduce(t)
            return t

        def agree_max(t):
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t

        def barrier():
            dist.barrier()
    else:
        sys.exit(f"python_allreduce.py: unknown implementation {impl!r} (hvdrun, horovod or torch)")
    for nbytes in sizes:
        t = torch.ones(max(nbytes // 4, 1), dtype=torch.float32)
        for _ in range(3):
            op(t)
        # Calls per batch: about 0.2 s, the same count on every rank.
        barrier()
        t0 = time.perf_counter()
        op(t)
        once = torch.tensor([time.perf_counter() - t0])
        reps = torch.tensor([max(3, min(20000, int(0.2 / max(once.item(), 1e-7))))])
        reps = int(agree_max(reps.float()).item())  # the same count on every rank
        times = []
        for _ in range(5):
            barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                op(t)
            times.append((time.perf_counter() - t0) / reps)
        if rank == 0:
            print(f"result impl={impl} bytes={t.numel() * 4} us={statistics.median(times) * 1e6:.2f}",
                  flush=True)


main()
