#!/usr/bin/env python3
"""Horovod's PyTorch synthetic benchmark, rewritten so that one program measures either
hvdrun.torch (--api hvdrun, under hvdrun) or Horovod itself (--api horovod, under
horovodrun): the same model, fake data, optimizer and timing, so the two figures are
comparable. Flags and output follow Horovod's examples/pytorch/pytorch_synthetic_benchmark.py
(plus --api and --image-size). bench/horovod_synthetic.sh runs both side by side."""
import argparse
import importlib
import timeit

import torch
import torch.nn.functional as F
from torchvision import models

parser = argparse.ArgumentParser(description="PyTorch synthetic benchmark",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--api", choices=["hvdrun", "horovod"], default="hvdrun",
                    help="hvdrun.torch or horovod.torch")
parser.add_argument("--fp16-allreduce", action="store_true", help="fp16 compression")
parser.add_argument("--model", default="resnet50", help="torchvision model")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--image-size", type=int, default=224, help="square input images")
parser.add_argument("--num-warmup-batches", type=int, default=10,
                    help="batches before timing starts")
parser.add_argument("--num-batches-per-iter", type=int, default=10,
                    help="batches per timed iteration")
parser.add_argument("--num-iters", type=int, default=10, help="timed iterations")
parser.add_argument("--no-cuda", action="store_true", help="train on the CPU")
args = parser.parse_args()

hvd = importlib.import_module("hvdrun.torch" if args.api == "hvdrun" else "horovod.torch")
hvd.init()
cuda = not args.no_cuda and torch.cuda.is_available()
if cuda:
    torch.cuda.set_device(hvd.local_rank())

model = getattr(models, args.model)()
if cuda:
    model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression, op=hvd.Average)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.randint(0, 1000, (args.batch_size,))
if cuda:
    data, target = data.cuda(), target.cuda()


def step():
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
    if cuda:
        torch.cuda.synchronize()


def log(text):
    if hvd.rank() == 0:
        print(text, flush=True)


device = "GPU" if cuda else "CPU"
log(f"API: {args.api}.torch")
log(f"Model: {args.model}")
log(f"Batch size: {args.batch_size}")
log(f"Number of {device}s: {hvd.size()}")
log("Running warmup...")
timeit.timeit(step, number=args.num_warmup_batches)
log("Running benchmark...")
rates = []
for i in range(args.num_iters):
    seconds = timeit.timeit(step, number=args.num_batches_per_iter)
    rates.append(args.batch_size * args.num_batches_per_iter / seconds)
    log(f"Iter #{i}: {rates[-1]:.1f} img/sec per {device}")
mean = sum(rates) / len(rates)
conf = 1.96 * (sum((r - mean) ** 2 for r in rates) / len(rates)) ** 0.5
log(f"Img/sec per {device}: {mean:.1f} +-{conf:.1f}")
log(f"Total img/sec on {hvd.size()} {device}(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")
