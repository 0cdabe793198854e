"""One rank of np 2 inside hvd.elastic.run calling an allreduce on a set of rank 0 only:
rank 1's own mistake, which must reach the program as ValueError on the first call (as in
Horovod), not as HorovodInternalError, which hvd.elastic.run answers by restoring the
last commit and calling the function again. Prints "rank R: ..." with what happened."""
import sys

import torch

import hvdrun.torch as hvd

hvd.init()
first = hvd.add_process_set([0])
state = hvd.elastic.TorchState(model=torch.nn.Linear(2, 1), batch=0)
calls = []


@hvd.elastic.run
def train(state):
    calls.append(state.batch)
    if len(calls) > 1:
        print(f"rank {hvd.rank()}: called again after a restore", flush=True)
        sys.exit(3)
    return hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=first).item()


try:
    print(f"rank {hvd.rank()}: reduced {train(state)}", flush=True)
except ValueError as e:
    assert "is not in process set" in str(e), e
    print(f"rank {hvd.rank()}: ValueError on call {len(calls)}", flush=True)
