#!/usr/bin/env python3
"""A small CPU training step under hvdrun.torch, for bench/binding.sh: a 3-layer MLP
(512 wide) on a synthetic batch, hvd.DistributedOptimizer averaging the gradients each
step. Rank 0 prints `result step_ms=M` (the slowest rank's median of STEPS timed steps,
after 5 warm-up steps).
  binding_step.py [STEPS=30] [BATCH=32]"""
import statistics
import sys
import time

import torch

import hvdrun.torch as hvd

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
hvd.init()
torch.manual_seed(hvd.rank())
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.randn(batch, 512)
y = torch.randint(0, 10, (batch,))
times = []
for i in range(5 + steps):
    t0 = time.perf_counter()
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if i >= 5:
        times.append(time.perf_counter() - t0)
median = torch.tensor([statistics.median(times) * 1e3], dtype=torch.float64)
slowest = hvd.allreduce(median, op=hvd.Max, name="step_ms")
if hvd.rank() == 0:
    print(f"result step_ms={slowest.item():.2f}", flush=True)
hvd.shutdown()
