"""The run drawn in docs/timeline.svg: two steps of a small training-like sequence (two
gradient allreduces, an alltoall of tokens, a reducescatter of a shard), with rank 3 late
by 5 ms before the second step.
  HOROVOD_TIMELINE=/tmp/timeline.json hvdrun -np 4 -x HOROVOD_TIMELINE \\
      python3 bench/timeline_example.py
  python3 bench/timeline_svg.py /tmp/timeline.json docs/timeline.svg --rows 10 --to-ms 236
"""
import time

import torch

import hvdrun.torch as hvd

hvd.init()
r = hvd.rank()
for step in range(2):
    if r == 3 and step == 1:
        time.sleep(0.005)  # one rank late: the next negotiation waits for it
    hvd.allreduce(torch.ones(1 << 20), name=f"grad.fc1.{step}")
    hvd.allreduce(torch.ones(1 << 14), name=f"grad.fc2.{step}")
    hvd.alltoall(torch.ones(4, 1 << 16), name=f"tokens.{step}")
    hvd.reducescatter(torch.ones(4, 1 << 16), name=f"shard.{step}")
hvd.shutdown()
