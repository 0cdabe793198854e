"""Ranks that fail, or exit untidily, after hvd.init(); the mode is argv[1]:
  raise-in-collective  rank 1 raises while the others wait in an allreduce
  raise-in-backward    rank 1's backward raises inside DistributedOptimizer's hook while
                       the others wait in step()
  pending-at-exit      every rank leaves with an allreduce submitted and not waited for
  no-shutdown          every rank leaves without calling shutdown()"""
import sys
import time

import torch

import hvdrun.torch as hvd



def failing_now():
    """Tells the test when the failure happens (CLOCK_MONOTONIC, shared by every process
    of the machine), so it can time the teardown alone, not the start of torch."""
    print(f"failing at {time.monotonic():.3f}", file=sys.stderr, flush=True)


mode = sys.argv[1]
hvd.init()
r = hvd.rank()
if mode == "raise-in-collective":
    if r == 1:
        failing_now()
        raise RuntimeError("deliberate failure on rank 1 after init")
    hvd.allreduce(torch.ones(3))
    hvd.barrier()
elif mode == "raise-in-backward":
    model = torch.nn.Linear(4, 4)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    model(torch.ones(1, 4)).sum().backward()
    if r == 1:
        failing_now()
        model(torch.ones(1, 4)).sum().backward()  # a second pass: the hook raises
    opt.step()
    hvd.barrier()
elif mode == "pending-at-exit":
    hvd.allreduce_async(torch.ones(1 << 16))
    print(f"rank {r}: leaving with a collective pending", flush=True)
elif mode == "no-shutdown":
    hvd.allreduce(torch.ones(3))
    print(f"rank {r}: leaving without shutdown", flush=True)
