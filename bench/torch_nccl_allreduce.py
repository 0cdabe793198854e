"""The peer for bench/nccl_allreduce.sh: torch.distributed's NCCL allreduce, started by
hvdrun (torch reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from hvdrun's
environment). Same protocol and output as `runtime_gpu_worker bench`: rank 0 prints
"init <seconds>" (init_process_group and a first 1-element allreduce, which builds the
NCCL communicator) and "bench <bytes> <seconds per op> <algbw GB/s> <busbw GB/s>".
Usage: hvdrun -np N python3 bench/torch_nccl_allreduce.py BYTES...
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    t0 = time.perf_counter()
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl")
    one = torch.ones(1, device=dev)
    dist.all_reduce(one)
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t0
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"init {init_s:.6f}", flush=True)
    for nbytes in (int(a) for a in sys.argv[1:]):
        buf = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
        for _ in range(3):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        t = time.perf_counter()
        dist.all_reduce(buf)
        torch.cuda.synchronize()
        once = time.perf_counter() - t
        iters = torch.tensor([min(max(int(0.5 / max(once, 1e-6)), 5), 2000)], device=dev)
        dist.broadcast(iters, 0)
        iters = int(iters.item())
        dist.barrier()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        per_op = (time.perf_counter() - t) / iters
        algbw = buf.numel() * 4 / per_op / 1e9
        if rank == 0:
            print(f"bench {buf.numel() * 4} {per_op:.9f} {algbw:.3f} {algbw * 2 * (n - 1) / n:.3f}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
