"""Elastic mode from Python: hvd.generation() follows HVDRUN_GENERATION; in generation 0
rank 1 fails after a collective, and generation 1 resumes from the checkpoint rank 0
wrote, then every rank says so."""
import os
import sys

import torch

import hvdrun.torch as hvd

hvd.init()
ckpt = sys.argv[1]
gen = hvd.generation()
assert gen == int(os.environ["HVDRUN_GENERATION"]), (gen, os.environ["HVDRUN_GENERATION"])
step = 0
if gen > 0:
    step = torch.load(ckpt)["step"]
total = hvd.allreduce(torch.ones(3), op=hvd.Sum)
assert total.tolist() == [float(hvd.size())] * 3
if gen == 0:
    if hvd.rank() == 0:
        torch.save({"step": 41}, ckpt)
    hvd.barrier()
    if hvd.rank() == 1:
        sys.exit(3)
    hvd.barrier()  # rank 1 never comes: the launcher stops this generation
    sys.exit(0)
print(f"generation {gen} resumed at step {step + 1}", flush=True)
hvd.shutdown()
