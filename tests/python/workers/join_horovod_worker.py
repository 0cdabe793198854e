"""A Horovod-API training program under join mode: hvd.init(), DistributedOptimizer, a few
SGD steps of _tiny_model on each rank's own batch; writes its weights to
OUT/horovod-RANK.pt and prints "trained"."""
import os
import sys

import torch

import _tiny_model as tiny
import hvdrun.torch as hvd

hvd.init()
out = sys.argv[1]
net = tiny.model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=tiny.LR),
                               named_parameters=net.named_parameters())
hvd.broadcast_parameters(net.state_dict(), root_rank=0)
for step in range(tiny.STEPS):
    opt.zero_grad()
    tiny.loss(net, hvd.rank(), step).backward()
    opt.step()
torch.save(net.state_dict(), os.path.join(out, f"horovod-{hvd.rank()}.pt"))
print(f"trained rank {hvd.rank()} of {hvd.size()} MASTER_PORT={os.environ['MASTER_PORT']} "
      f"HVDRUN_RENDEZVOUS_PORT={os.environ['HVDRUN_RENDEZVOUS_PORT']} "
      f"HOROVOD_GLOO_RENDEZVOUS_PORT={os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT']}")
hvd.shutdown()
