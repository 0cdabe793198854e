"""One rank checking hvd.SyncBatchNorm against torch's BatchNorm run in this one process
on the concatenation of every rank's batch (every rank builds the whole batch from the
same seed and keeps its own rows; the ranks' batches differ in size, and with 4 ranks one
rank has no rows at all): outputs, the input's gradient, the weight's and bias's
gradients summed over the ranks, running statistics over several steps (momentum and
momentum=None), eval mode, track_running_stats=False, affine=False, 1d/2d/3d shapes,
float32 and float64 (and float16 input on a GPU); then a small model trained with
DistributedOptimizer equals the same model trained in one process on the whole batch.
Argument: the device, cpu (default) or cuda (run with HVDRUN_NCCL=require; ranks sharing
one GPU claim a host each, NCCL_HOSTID, as workers/gpu_worker.py). Prints
"rank R: sync batch norm checks passed"."""
import copy

import torch
from _checks import device_argument, pin_device

import hvdrun.torch as hvd

DEV = device_argument("sync-bn")
hvd.init()
r, n = hvd.rank(), hvd.size()
pin_device(DEV, hvd.local_rank())
SIZES = {2: [3, 5], 4: [4, 0, 6, 3]}[n]
START = sum(SIZES[:r])
MINE = slice(START, START + SIZES[r])


def close(a, b, dtype, what):
    tol = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 5e-3}[dtype]
    assert a.shape == b.shape, (what, a.shape, b.shape)
    assert torch.allclose(a, b, rtol=tol, atol=tol), \
        f"{what}: max difference {(a - b).abs().max().item()}"


def compare(shape_tail, dtype, steps=3, input_dtype=None, **kwargs):
    """Checks on a batch of shape (N,) + shape_tail; the layers' parameters in `dtype`,
    the input in `input_dtype` (default: the same)."""
    input_dtype = input_dtype or dtype
    what = f"{shape_tail} {dtype} {input_dtype} {kwargs} on {DEV}"
    torch.manual_seed(1234)
    channels = shape_tail[0]
    total = sum(SIZES)
    cls = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm2d,
           4: torch.nn.BatchNorm3d}[len(shape_tail)]
    ref = cls(channels, **kwargs).to(DEV, dtype)
    sync = hvd.SyncBatchNorm(channels, **kwargs).to(DEV, dtype)
    if ref.affine:
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
            sync.weight.copy_(ref.weight)
            sync.bias.copy_(ref.bias)
    for step in range(steps):
        # A shifted, scaled batch: the variance is computed around a far-off mean.
        full = (torch.randn((total,) + shape_tail, dtype=dtype) * (step + 1) + 3.0 * step)
        full = full.to(DEV, input_dtype)
        upstream = torch.randn((total,) + shape_tail, dtype=dtype).to(DEV, input_dtype)
        x_ref = full.clone().requires_grad_(True)
        x = full[MINE].clone().requires_grad_(True)
        out_ref = ref(x_ref)
        out = sync(x)
        assert out.dtype == input_dtype and out.device == x.device, (out.dtype, out.device)
        close(out, out_ref[MINE].detach(), input_dtype, f"output, step {step}, {what}")
        (out_ref * upstream).sum().backward()
        (out * upstream[MINE]).sum().backward()
        close(x.grad, x_ref.grad[MINE], input_dtype, f"input gradient, step {step}, {what}")
        if ref.affine:
            close(hvd.allreduce(sync.weight.grad, op=hvd.Sum), ref.weight.grad, dtype,
                  f"weight gradient, step {step}, {what}")
            close(hvd.allreduce(sync.bias.grad, op=hvd.Sum), ref.bias.grad, dtype,
                  f"bias gradient, step {step}, {what}")
            ref.weight.grad = ref.bias.grad = sync.weight.grad = sync.bias.grad = None
        if ref.track_running_stats:
            close(sync.running_mean, ref.running_mean, dtype, f"running mean, {what}")
            close(sync.running_var, ref.running_var, dtype, f"running var, {what}")
            assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked)
    # Eval mode: running statistics (no communication), or batch statistics when the
    # layer keeps none.
    ref.eval()
    sync.eval()
    full = (torch.randn((total,) + shape_tail, dtype=dtype) + 1.0).to(DEV, input_dtype)
    with torch.no_grad():
        close(sync(full[MINE]), ref(full)[MINE], input_dtype, f"eval output, {what}")


for dtype in (torch.float64, torch.float32):
    compare((3,), dtype)                      # BatchNorm1d on (N, C)
    compare((4, 5), dtype)                    # BatchNorm1d on (N, C, L)
    compare((2, 3, 4), dtype, momentum=None)  # BatchNorm2d, cumulative average
    compare((2, 2, 3, 2), dtype, momentum=0.3)  # BatchNorm3d
compare((3, 4), torch.float64, affine=False)
compare((3, 4), torch.float64, track_running_stats=False)
compare((3, 4), torch.float64, affine=False, track_running_stats=False)
if DEV == "cuda":
    # Mixed precision: half input, float32 layer (normalized in float32, as torch's).
    compare((4, 6, 5), torch.float32, input_dtype=torch.float16)

# Only the weight needs a gradient (the input does not): no allreduce in backward.
layer = hvd.SyncBatchNorm(3).to(DEV, torch.float64)
torch.manual_seed(7)
full = torch.randn(sum(SIZES), 3, dtype=torch.float64).to(DEV)
layer(full[MINE]).sum().backward()
assert layer.weight.grad is not None

# Errors: too few dimensions, wrong channel count, a single value per channel overall.
for bad, words in ((torch.ones(4), "2D"), (torch.ones(2, 5), "channels")):
    try:
        layer(bad.to(DEV, torch.float64))
    except ValueError as e:
        assert words in str(e), e
    else:
        raise AssertionError(f"SyncBatchNorm accepted {tuple(bad.shape)}")
try:
    layer(torch.ones(1 if r == 0 else 0, 3, dtype=torch.float64, device=DEV))
except ValueError as e:
    assert "more than 1 value per channel" in str(e), e
else:
    raise AssertionError("SyncBatchNorm accepted one value per channel")


# Training: a model with SyncBatchNorm under DistributedOptimizer(op=Sum), each rank's
# loss its rows' share of the mean over the whole batch, equals the model trained in one
# process on the whole batch.
def model():
    torch.manual_seed(99)
    return torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), hvd.SyncBatchNorm(4),
                               torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 5 * 5, 1)
                               ).to(DEV, torch.float64)


def plain(sync_model):
    # The same model with torch's BatchNorm2d in place of SyncBatchNorm, same values.
    m = copy.deepcopy(sync_model)
    bn = torch.nn.BatchNorm2d(4).to(DEV, torch.float64)
    bn.load_state_dict(m[1].state_dict())
    m[1] = bn
    return m


dist = model()
single = plain(dist)
opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=dist.named_parameters(), op=hvd.Sum)
ref_opt = torch.optim.SGD(single.parameters(), lr=0.1, momentum=0.9)
torch.manual_seed(5)
for step in range(5):
    data = torch.randn(sum(SIZES), 2, 5, 5, dtype=torch.float64).to(DEV)
    target = torch.randn(sum(SIZES), 1, dtype=torch.float64).to(DEV)
    opt.zero_grad()
    loss = ((dist(data[MINE]) - target[MINE]) ** 2).sum() / sum(SIZES)
    loss.backward()
    opt.step()
    ref_opt.zero_grad()
    ((single(data) - target) ** 2).mean().backward()
    ref_opt.step()
for (name, p), q in zip(dist.named_parameters(), single.parameters()):
    close(p.detach(), q.detach(), torch.float64, f"trained {name}")
close(dist[1].running_var, single[1].running_var, torch.float64, "trained running var")
flat = torch.cat([p.detach().reshape(-1) for p in dist.parameters()]).unsqueeze(0)
everyone = hvd.allgather(flat)
assert all(torch.equal(everyone[0], row) for row in everyone), "ranks' weights differ"

print(f"rank {r}: sync batch norm checks passed", flush=True)
