"""One rank checking hvdrun.torch on CUDA tensors (NCCL through libhvdrun, enqueued on the
current stream): collectives against the same values on the CPU, a DistributedOptimizer
on a GPU model keeping parameters identical across ranks, and a model with one layer on
the CPU and the rest on the GPU (buckets of each device). Prints "rank R: gpu checks
passed". Run with HVDRUN_NCCL=require; with fewer GPUs than ranks each rank claims a host
of its own (NCCL_HOSTID) so that NCCL accepts two ranks on one device."""
import os

import torch

rank_env = int(os.environ["HVDRUN_RANK"])
if torch.cuda.device_count() < int(os.environ["HVDRUN_LOCAL_SIZE"]):
    os.environ["NCCL_HOSTID"] = f"hvdrun-python-gpu-{rank_env}"

import hvdrun.torch as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
assert hvd.nccl_built(), "NCCL is not available on this rank"
torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
dev = torch.device("cuda", torch.cuda.current_device())
total = n * (n + 1) / 2

for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
           torch.int64, torch.uint8, torch.int8):
    x = torch.full((1000,), r + 1, dtype=dt, device=dev)
    got = hvd.allreduce(x, op=hvd.Sum)
    assert got.is_cuda and got.dtype == dt
    assert torch.equal(got.cpu(), torch.full((1000,), total).to(dt)), dt
    assert torch.equal(hvd.allreduce(x, op=hvd.Max).cpu(), torch.full((1000,), n).to(dt)), dt
avg = hvd.allreduce(torch.full((7,), float(r + 1), device=dev))
assert torch.allclose(avg.cpu(), torch.full((7,), total / n))
y = torch.full((3, 3), float(r + 1), device=dev)
assert hvd.allreduce_(y, op=hvd.Sum, postscale_factor=2.0) is y
assert torch.equal(y.cpu(), torch.full((3, 3), 2 * total))
h = hvd.allreduce_async(torch.full((4,), 1.0, device=dev), op=hvd.Sum)
assert torch.equal(hvd.synchronize(h).cpu(), torch.full((4,), float(n)))
# On another stream: the result is ordered after the collective on the stream it used.
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    z = torch.full((1 << 20,), 1.0, device=dev)
    h = hvd.allreduce_async_(z, op=hvd.Sum)
assert torch.equal(hvd.synchronize(h).cpu(), torch.full((1 << 20,), float(n)))

g = hvd.allgather(torch.full((r + 1, 2), r, device=dev))
assert g.is_cuda and g[:, 0].tolist() == [k for k in range(n) for _ in range(k + 1)]
b = hvd.broadcast(torch.full((5,), r, device=dev), n - 1)
assert b.cpu().tolist() == [n - 1] * 5
assert hvd.broadcast_object(("gpu", r), 0) == ("gpu", 0)

torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters(),
                               compression=hvd.Compression.fp16)
hvd.broadcast_parameters(model.state_dict(), 0)
torch.manual_seed(100 + r)
for _ in range(20):
    opt.zero_grad()
    model(torch.randn(8, 16, device=dev)).pow(2).mean().backward()
    opt.step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
everyone = hvd.allgather(flat)
assert all(torch.equal(everyone[0], row) for row in everyone), "GPU parameters differ"


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cpu_layer = torch.nn.Linear(4, 8)
        self.gpu_layer = torch.nn.Linear(8, 2).to(dev)

    def forward(self, x):
        return self.gpu_layer(self.cpu_layer(x).to(dev))


mixed = Mixed()
hvd.broadcast_parameters(mixed.state_dict(), 0)
opt2 = hvd.DistributedOptimizer(torch.optim.SGD(mixed.parameters(), lr=0.1),
                                named_parameters=mixed.named_parameters())
for _ in range(5):
    opt2.zero_grad()
    mixed(torch.randn(3, 4)).sum().backward()
    opt2.step()
for p in mixed.parameters():
    rows = hvd.allgather(p.detach().reshape(1, -1))
    assert all(torch.equal(rows[0], row) for row in rows), "mixed-device parameters differ"

# Negotiation on CUDA tensors: mismatches raise on every rank naming both sides, the job
# goes on, and a joined rank stands in on the GPU (through NCCL, with the op's identity).
if n > 1:
    def expect_error(fn, text):
        try:
            fn()
        except hvd.HorovodInternalError as e:
            assert text in str(e), (text, str(e))
            return
        raise AssertionError(f"no error; expected {text!r}")

    expect_error(lambda: hvd.allreduce(torch.ones(10 if r == 0 else 3, device=dev), name="g.size"),
                 "allreduce 'g.size': rank 0 has float32[10], rank 1 has float32[3]")
    expect_error(lambda: hvd.allreduce(
        torch.ones(4, device=dev, dtype=torch.float16 if r == 0 else torch.float32)),
        "rank 0 has float16[4], rank 1 has float32[4]")
    expect_error(lambda: hvd.allreduce(torch.ones(4, device=dev if r == 0 else "cpu")),
                 "rank 0 has a GPU tensor, rank 1 a CPU one")
    assert hvd.allreduce(torch.ones(2, device=dev), op=hvd.Sum).tolist() == [float(n)] * 2
    if r == 0:
        last = hvd.join()
    else:
        mx = hvd.allreduce(torch.full((3,), float(r), device=dev), op=hvd.Max)
        mn = hvd.allreduce(torch.full((3,), float(r), device=dev), op=hvd.Min)
        sm = hvd.allreduce(torch.full((3,), 1.0, device=dev), op=hvd.Sum)
        assert mx.tolist() == [float(n - 1)] * 3 and mn.tolist() == [1.0] * 3, (mx, mn)
        assert sm.tolist() == [float(n - 1)] * 3, sm
        last = hvd.join()
    assert last >= 1, last

# alltoall and reducescatter on CUDA tensors (grouped ncclSend/ncclRecv, ncclReduce per
# slice), against the CPU path's values.
for dt in (torch.float32, torch.float16, torch.int64):
    send = torch.arange(3 * n, dtype=dt).reshape(n, 3) + 10 * r
    out, received = hvd.alltoall(send.to(dev), splits=[1] * n)
    cpu_out, cpu_received = hvd.alltoall(send, splits=[1] * n)
    assert out.is_cuda and torch.equal(out.cpu(), cpu_out), (dt, out, cpu_out)
    assert received.tolist() == cpu_received.tolist() == [1] * n
    rows = torch.arange(7 * 4, dtype=dt).reshape(7, 4) % 5 * (r + 1)
    got = hvd.reducescatter(rows.to(dev), op=hvd.Sum)
    assert got.is_cuda and torch.equal(got.cpu(), hvd.reducescatter(rows, op=hvd.Sum)), dt
avg = hvd.reducescatter(torch.ones(2 * n, 2, device=dev) * (r + 1))
assert torch.allclose(avg.cpu(), torch.full((2, 2), (n + 1) / 2))
# A process set of every rank but the last on the GPU: its own NCCL communicator, built on
# first use. (At np 1 there is no set but the global one, which cannot be added again.)
members = list(range(n - 1))
ps = (hvd.add_process_set(members)
      if os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") and n > 1 else None)
if ps is not None and r in members:
    got = hvd.allreduce(torch.full((100,), r + 1.0, device=dev), op=hvd.Sum, process_set=ps)
    assert torch.equal(got.cpu(), torch.full((100,), float(sum(k + 1 for k in members))))
    a, _ = hvd.alltoall(torch.arange(len(members), device=dev) + 10 * r, splits=[1] * len(members),
                        process_set=ps)
    assert a.tolist() == [10 * k + members.index(r) for k in members]
if ps is not None:
    hvd.barrier()
    assert hvd.remove_process_set(ps)

hvd.shutdown()
print(f"rank {r}: gpu checks passed")
