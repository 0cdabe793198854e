"""An unmodified torch.distributed program, as users run it under torchrun: env://
initialisation, a gloo all_reduce and all_gather, and one DistributedDataParallel step.

Under hvdrun it also checks every rank's environment against the placement that the
optional --slots argument describes (ranks per host, in host order, e.g. --slots 3,1),
so that a wrong RANK, LOCAL_RANK, GROUP_RANK, HOROVOD_* or MASTER_* value fails here
with the variable named. Prints "torch_ddp: rank R/N OK" and exits 0 on success.
"""

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def expected_coordinates(slots, rank):
    """Horovod's placement: hosts filled in order; cross = same local rank across hosts."""
    first = 0
    for host_index, n in enumerate(slots):
        if rank < first + n:
            local_rank = rank - first
            hosts_with_lr = [h for h, m in enumerate(slots) if m > local_rank]
            return {
                "LOCAL_RANK": local_rank,
                "LOCAL_WORLD_SIZE": n,
                "GROUP_RANK": host_index,
                "GROUP_WORLD_SIZE": len(slots),
                "HOROVOD_CROSS_RANK": hosts_with_lr.index(host_index),
                "HOROVOD_CROSS_SIZE": len(hosts_with_lr),
            }
        first += n
    raise SystemExit(f"torch_ddp: rank {rank} is outside --slots {slots}")


def check_env(slots):
    env = os.environ
    problems = []

    def want(name, value):
        got = env.get(name)
        if got != str(value):
            problems.append(f"{name}={got!r}, expected {str(value)!r}")

    rank = int(env["RANK"])
    size = int(env["WORLD_SIZE"])
    if slots is None:
        slots = [size]
    if sum(slots) != size:
        problems.append(f"WORLD_SIZE={size} but --slots adds up to {sum(slots)}")
    coords = expected_coordinates(slots, rank)
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"):
        want(name, coords[name])
    want("HOROVOD_RANK", rank)
    want("HOROVOD_SIZE", size)
    want("HOROVOD_LOCAL_RANK", coords["LOCAL_RANK"])
    want("HOROVOD_LOCAL_SIZE", coords["LOCAL_WORLD_SIZE"])
    want("HOROVOD_CROSS_RANK", coords["HOROVOD_CROSS_RANK"])
    want("HOROVOD_CROSS_SIZE", coords["HOROVOD_CROSS_SIZE"])
    want("HOROVOD_CONTROLLER", "gloo")
    want("HOROVOD_CPU_OPERATIONS", "gloo")
    for name in ("HOROVOD_HOSTNAME", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
                 "HOROVOD_GLOO_RENDEZVOUS_PORT", "MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            problems.append(f"{name} is not set")
    if not env.get("MASTER_PORT", "").isdigit():
        problems.append(f"MASTER_PORT={env.get('MASTER_PORT')!r} is not a port")
    if coords["LOCAL_WORLD_SIZE"] > 1 and "OMP_NUM_THREADS" not in env:
        problems.append("OMP_NUM_THREADS is not set although ranks share this host")
    if problems:
        for p in problems:
            print(f"torch_ddp: rank {rank}: {p}", file=sys.stderr)
        raise SystemExit(3)
    return rank, size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slots", help="ranks per host in host order, e.g. 2,2")
    args = parser.parse_args()
    slots = [int(s) for s in args.slots.split(",")] if args.slots else None
    rank, size = check_env(slots)

    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=60))
    assert dist.get_rank() == rank and dist.get_world_size() == size

    # all_reduce: sum of rank+1 over all ranks.
    t = torch.tensor([float(rank + 1), 1.0])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    assert t.tolist() == [size * (size + 1) / 2, float(size)], t

    # all_gather: everyone's rank, in rank order.
    gathered = [torch.zeros(1) for _ in range(size)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))
    assert [int(g.item()) for g in gathered] == list(range(size)), gathered

    # One DDP step: same initial weights (broadcast by DDP), different inputs per rank;
    # gradients are averaged, so every rank ends with identical parameters.
    torch.manual_seed(1234 + rank)  # deliberately different; DDP must broadcast rank 0's
    model = nn.Linear(4, 2)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x = torch.full((3, 4), float(rank + 1))
    loss = ddp(x).sum()
    loss.backward()
    # d(sum(Wx+b))/dW[i][j] = sum over the batch of x[:, j] = 3*(rank+1); averaged over
    # ranks: 3*(size+1)/2. d/db = 3 on every rank.
    expected_w = 3.0 * (size + 1) / 2.0
    assert torch.allclose(model.weight.grad, torch.full((2, 4), expected_w)), model.weight.grad
    assert torch.allclose(model.bias.grad, torch.full((2,), 3.0)), model.bias.grad
    opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(size)]
    dist.all_gather(everyone, flat)
    for r, other in enumerate(everyone):
        assert torch.equal(other, flat), f"parameters differ between rank {rank} and {r}"

    dist.barrier()
    dist.destroy_process_group()
    print(f"torch_ddp: rank {rank}/{size} OK", flush=True)


if __name__ == "__main__":
    main()
