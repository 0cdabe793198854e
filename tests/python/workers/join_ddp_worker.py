"""A plain torch DDP program (no hvdrun import): init_process_group('gloo') from the
variables the launcher sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), the same
training as join_horovod_worker.py; writes OUT/ddp-RANK.pt and prints "trained"."""
import os
import sys

import torch
import torch.distributed as dist

import _tiny_model as tiny

dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
assert (rank, size) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
# LOCAL_RANK picks a rank's device in a real program: ranks fill node after node.
assert int(os.environ["LOCAL_RANK"]) == rank % int(os.environ["LOCAL_WORLD_SIZE"])
net = torch.nn.parallel.DistributedDataParallel(tiny.model())
opt = torch.optim.SGD(net.parameters(), lr=tiny.LR)
for step in range(tiny.STEPS):
    opt.zero_grad()
    tiny.loss(net, rank, step).backward()
    opt.step()
torch.save(net.module.state_dict(), os.path.join(sys.argv[1], f"ddp-{rank}.pt"))
print(f"trained rank {rank} of {size} MASTER_PORT={os.environ['MASTER_PORT']} "
      f"HVDRUN_RENDEZVOUS_PORT={os.environ['HVDRUN_RENDEZVOUS_PORT']} "
      f"HOROVOD_GLOO_RENDEZVOUS_PORT={os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT']}")
dist.destroy_process_group()
