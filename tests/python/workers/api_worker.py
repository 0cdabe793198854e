"""One rank exercising every function of hvdrun.torch's API against values it can
predict (rank r contributes r + 1). Prints "rank R: api checks passed" at the end; any
failed check raises, which fails the job."""
import os
import sys

import torch
from _checks import expect_raises

import hvdrun.torch as hvd


# Before init.
assert not hvd.is_initialized()
expect_raises(ValueError, hvd.rank, "init")
expect_raises(NotImplementedError, lambda: hvd.init(comm=[0]), "comm")

hvd.init()
hvd.init()  # idempotent
assert hvd.is_initialized()
r, n = hvd.rank(), hvd.size()
assert 0 <= r < n
assert n == int(os.environ["HVDRUN_SIZE"]) and r == int(os.environ["HVDRUN_RANK"])
assert hvd.local_rank() == int(os.environ["HVDRUN_LOCAL_RANK"])
assert hvd.local_size() == int(os.environ["HVDRUN_LOCAL_SIZE"])
assert hvd.cross_rank() == int(os.environ["HVDRUN_CROSS_RANK"])
assert hvd.cross_size() == int(os.environ["HVDRUN_CROSS_SIZE"])
assert hvd.gloo_built() and hvd.gloo_enabled()
assert not hvd.mpi_built() and not hvd.mpi_enabled()
assert isinstance(hvd.nccl_built(), bool)
assert not hvd.rocm_built() and not hvd.ddl_built() and not hvd.ccl_built()
assert isinstance(hvd.cuda_built(), bool)

mine = float(r + 1)
total = n * (n + 1) / 2
prod = 1.0
for k in range(1, n + 1):
    prod *= k

# allreduce: every op on every dtype where the result is exact.
float_types = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64]
int_types = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]
for dt in float_types + int_types:
    x = torch.full((7,), mine, dtype=torch.float64).to(dt)
    got = hvd.allreduce(x, op=hvd.Sum)
    assert got.dtype == dt and torch.equal(got, torch.full((7,), total).to(dt)), (dt, got)
    assert torch.equal(x, torch.full((7,), mine).to(dt)), "allreduce modified its input"
    if dt.is_complex:
        continue
    assert torch.equal(hvd.allreduce(x, op=hvd.Min), torch.full((7,), 1.0).to(dt)), dt
    assert torch.equal(hvd.allreduce(x, op=hvd.Max), torch.full((7,), float(n)).to(dt)), dt
    assert torch.equal(hvd.allreduce(x, op=hvd.Product), torch.full((7,), prod).to(dt)), dt
for dt in float_types:
    x = torch.full((5,), mine, dtype=torch.float64).to(dt)
    avg = hvd.allreduce(x)  # Average is the default
    assert torch.allclose(avg.to(torch.complex128), torch.full((5,), total / n).to(torch.complex128),
                          rtol=1e-2), (dt, avg)
expect_raises(NotImplementedError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool)),
              "torch.bool")
expect_raises(NotImplementedError,
              lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64), op=hvd.Max), "complex")

# Deprecated average flag, op precedence.
x = torch.full((3,), mine)
assert torch.equal(hvd.allreduce(x, average=False), torch.full((3,), total))
assert torch.allclose(hvd.allreduce(x, average=True), torch.full((3,), total / n))
expect_raises(ValueError, lambda: hvd.allreduce(x, average=True, op=hvd.Sum), "op")

# Scale factors, non-contiguous input, empty and multi-dimensional tensors.
got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
assert torch.allclose(got, torch.full((3,), total))
got = hvd.allreduce(torch.full((3,), mine), op=hvd.Sum, prescale_factor=3.0)
assert torch.allclose(got, torch.full((3,), 3 * total))
t = torch.full((4, 6), mine).t()
assert not t.is_contiguous()
assert torch.equal(hvd.allreduce(t, op=hvd.Sum), torch.full((6, 4), total))
assert hvd.allreduce(torch.empty(0), op=hvd.Sum).numel() == 0
ints = torch.full((2, 3), r + 1, dtype=torch.int32)
assert torch.equal(hvd.allreduce(ints, op=hvd.Sum, postscale_factor=2.0),
                   torch.full((2, 3), int(2 * total), dtype=torch.int32))

# In place, asynchronous, poll/synchronize.
y = torch.full((9,), mine)
out = hvd.allreduce_(y, op=hvd.Sum)
assert out is y and torch.equal(y, torch.full((9,), total))
expect_raises(ValueError, lambda: hvd.allreduce_(torch.ones(4, 4).t(), op=hvd.Sum),
              "contiguous")
a = torch.full((1000,), mine)
h1 = hvd.allreduce_async(a, op=hvd.Sum)
b = torch.full((10,), mine)
h2 = hvd.allreduce_async_(b, op=hvd.Max)
while not hvd.poll(h2):
    pass  # poll until done: libhvdrun runs the two in order
assert hvd.poll(h1)
assert torch.equal(hvd.synchronize(h1), torch.full((1000,), total))
assert hvd.synchronize(h2) is b and torch.equal(b, torch.full((10,), float(n)))
assert hvd.synchronize(h1) is None  # already synchronized, as Horovod

# Grouped allreduce.
ts = [torch.full((3,), mine), torch.full((2, 2), 2 * mine, dtype=torch.float64)]
outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
assert torch.equal(outs[0], torch.full((3,), total))
assert torch.equal(outs[1], torch.full((2, 2), 2 * total, dtype=torch.float64))
h = hvd.grouped_allreduce_async(ts, op=hvd.Sum)
assert [o.sum().item() for o in hvd.synchronize(h)] == [3 * total, 8 * total]
got = hvd.grouped_allreduce_(ts, op=hvd.Max)
assert got[0] is ts[0] and torch.equal(ts[0], torch.full((3,), float(n)))
h = hvd.grouped_allreduce_async_([torch.ones(2)], op=hvd.Sum)
assert torch.equal(hvd.synchronize(h)[0], torch.full((2,), float(n)))

# Compression in allreduce.
z = torch.full((6,), mine * 1.001)
got = hvd.allreduce(z, op=hvd.Sum, compression=hvd.Compression.fp16)
assert got.dtype == torch.float32 and torch.allclose(got, torch.full((6,), total * 1.001), rtol=1e-2)

# allreduce is differentiable: the gradient of a sum is reduced too.
w = torch.full((4,), mine, requires_grad=True)
hvd.allreduce(w, op=hvd.Sum).sum().backward()
assert torch.equal(w.grad, torch.full((4,), float(n)))

# allgather: first dimensions differ per rank, any dtype, bit for bit.
for dt in [torch.float32, torch.float16, torch.int64, torch.uint8, torch.int8, torch.bool,
           torch.complex128, torch.int16]:
    piece = torch.full((r + 1, 2), r % 2, dtype=torch.float64).to(dt)
    got = hvd.allgather(piece)
    want = torch.cat([torch.full((k + 1, 2), k % 2, dtype=torch.float64).to(dt) for k in range(n)])
    assert got.dtype == dt and torch.equal(got, want), (dt, got)
# Back-to-back allgathers of one size with changing contents: each must see this round's
# values from every rank, never a faster rank's next round.
for i in range(100):
    got = hvd.allgather(torch.full((1, 5), i * 100 + r, dtype=torch.int64))
    assert got[:, 0].tolist() == [i * 100 + k for k in range(n)], (i, got[:, 0].tolist())
same = hvd.allgather(torch.full((2, 3), mine))
assert same.shape == (2 * n, 3) and same[::2, 0].tolist() == [float(k + 1) for k in range(n)]
h = hvd.allgather_async(torch.tensor([r]))
assert hvd.synchronize(h).tolist() == list(range(n))
assert hvd.allgather(torch.empty(0, 5)).shape == (0, 5)
expect_raises(ValueError, lambda: hvd.allgather(torch.tensor(1.0)), "dimension")
if n > 1:
    # Trailing dimensions must agree: every rank raises the same error, in step.
    expect_raises(hvd.HorovodInternalError, lambda: hvd.allgather(torch.zeros(1, r + 1)),
                  "only the first dimension may differ")
gs = hvd.grouped_allgather([torch.tensor([r]), torch.tensor([[r, r]])])
assert gs[0].tolist() == list(range(n)) and gs[1].shape == (n, 2)
h = hvd.grouped_allgather_async([torch.tensor([r])])
assert hvd.synchronize(h)[0].tolist() == list(range(n))
g = torch.full((r + 1,), 1.0, requires_grad=True)
hvd.allgather(g).sum().backward()  # each rank's slice of the averaged gradient
assert torch.equal(g.grad, torch.ones(r + 1))

# broadcast, from the last rank, of several dtypes.
root = n - 1
for dt in [torch.float32, torch.int64, torch.bool, torch.int8, torch.float16]:
    v = torch.full((3, 2), r, dtype=torch.float64).to(dt)
    got = hvd.broadcast(v, root)
    assert torch.equal(got, torch.full((3, 2), root, dtype=torch.float64).to(dt)), dt
    assert torch.equal(v, torch.full((3, 2), r, dtype=torch.float64).to(dt))
v = torch.full((5,), mine)
assert hvd.broadcast_(v, 0) is v and torch.equal(v, torch.ones(5))
h = hvd.broadcast_async(torch.tensor([r * 10]), root)
assert hvd.synchronize(h).tolist() == [root * 10]
v = torch.tensor([r, r])
h = hvd.broadcast_async_(v, root)
assert hvd.synchronize(h) is v and v.tolist() == [root, root]
if n > 1:
    # A root that is not a rank: each rank's own mistake, found before data moves.
    expect_raises(ValueError, lambda: hvd.broadcast(torch.ones(1), n + 3), "root",
                  f"pass a rank from 0 to {n - 1}")

# Objects.
obj = hvd.broadcast_object({"from": r, "lam": (lambda q: q + 1) if r == root else None}, root)
assert obj["from"] == root and obj["lam"](1) == 2
assert hvd.allgather_object({"r": r, "s": "x" * r}) == [{"r": k, "s": "x" * k} for k in range(n)]

# broadcast_parameters: state_dict, named_parameters and parameters lists.
torch.manual_seed(100 + r)
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
flat = torch.cat([t.reshape(-1).float() for t in model.state_dict().values()])
assert all(torch.equal(flat, f) for f in hvd.allgather(flat.unsqueeze(0)))
torch.manual_seed(200 + r)
model2 = torch.nn.Linear(2, 2)
hvd.broadcast_parameters(list(model2.named_parameters()), root_rank=root)
hvd.broadcast_parameters(list(model2.parameters()), root_rank=root)
flat = torch.cat([p.detach().reshape(-1) for p in model2.parameters()])
assert all(torch.equal(flat, f) for f in hvd.allgather(flat.unsqueeze(0)))
expect_raises(ValueError, lambda: hvd.broadcast_parameters(model2.parameters(), 0), "params")

# broadcast_optimizer_state: fresh and stepped optimizers, scalars and tensors.
for make in (lambda ps: torch.optim.SGD(ps, lr=0.1 * (r + 1), momentum=0.9),
             lambda ps: torch.optim.Adam(ps, lr=0.01 * (r + 1))):
    torch.manual_seed(300)
    m = torch.nn.Linear(3, 3)
    opt = make(m.parameters())
    torch.manual_seed(400 + r)
    m(torch.randn(2, 3)).sum().backward()
    opt.step()  # rank-dependent state
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    lrs = hvd.allgather_object(opt.param_groups[0]["lr"])
    assert lrs == [lrs[0]] * n, lrs
    for st in opt.state.values():
        for key, val in st.items():
            if torch.is_tensor(val):
                v = val.reshape(1, -1).float()
                assert all(torch.equal(v[0], f) for f in hvd.allgather(v)), key
fresh = torch.optim.Adam(torch.nn.Linear(2, 2).parameters(), lr=0.5 if r == 0 else 0.7)
hvd.broadcast_optimizer_state(fresh, 0)
assert fresh.param_groups[0]["lr"] == 0.5

# Unsupported Horovod API fails with its name and an alternative.
for name in ("Adasum", "DistributedAdasumOptimizer"):
    expect_raises(NotImplementedError, lambda: getattr(hvd, name), name, "instead")
    assert not hasattr(hvd, name)
expect_raises(TypeError, lambda: hvd.allreduce(x, process_set=object()), "ProcessSet")
expect_raises(NotImplementedError,
              lambda: hvd.DistributedOptimizer(torch.optim.SGD(model2.parameters(), lr=1), op=2),
              "Adasum")
expect_raises(NotImplementedError, lambda: hvd.allreduce(torch.ones(1).to_sparse()),
              "sparse_allreduce_async")
expect_raises(NotImplementedError, lambda: hvd.allreduce(torch.empty(2, device="meta")), "meta")
expect_raises(NotImplementedError, lambda: hvd.broadcast_(torch.empty(2, device="meta"), 0), "meta")
if not torch.cuda.is_available():
    # No GPU here: a CUDA tensor cannot even be made, so the NCCL message is checked
    # through the library's own answer.
    assert hvd.nccl_built() is False
assert hvd.global_process_set.included()

# barrier and join end the job in step.
hvd.barrier()
last = hvd.join()
assert 0 <= last < n
hvd.shutdown()
assert not hvd.is_initialized()
hvd.shutdown()  # idempotent
print(f"rank {r}: api checks passed")
sys.stdout.flush()
