"""One rank checking DistributedOptimizer: gradients equal the average of every rank's
local gradients; parameters stay bit-identical across ranks over many steps while the
ranks' autograd runs the hooks in different orders (the forward pass visits the branches
in a rank-dependent order, and one branch is unused on odd ranks); fp16 compression;
backward_passes_per_step; op=Sum; gradient_predivide_factor; skip_synchronize; the
zero_grad check; load_state_dict. Prints "rank R: optimizer checks passed"."""
import copy
import sys

import torch

import hvdrun.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40


class Branchy(torch.nn.Module):
    """Four branches whose order in forward depends on the rank, so backward produces
    their gradients (and fires the optimizer's hooks) in a rank-dependent order."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.branches = torch.nn.ModuleList(
            [torch.nn.Sequential(torch.nn.Linear(16, 16 + 8 * k), torch.nn.Tanh(),
                                 torch.nn.Linear(16 + 8 * k, 4)) for k in range(4)])
        self.head = torch.nn.Linear(4, 1)
        self.unused_on_odd = torch.nn.Linear(16, 4)
        self.frozen = torch.nn.Linear(2, 2)
        self.frozen.requires_grad_(False)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        order = list(range(4))
        order = order[r % 4:] + order[: r % 4]
        if r % 2:
            order.reverse()
        out = 0
        for k in order:
            out = out + self.branches[k](h)
        if r % 2 == 0:
            out = out + self.unused_on_odd(h)
        return self.head(out)


def identical_across_ranks(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
    everyone = hvd.allgather(flat)
    return all(torch.equal(everyone[0], row) for row in everyone)


def hook_order(model, x):
    """The order in which this rank's backward produces the branches' gradients."""
    seen = []
    handles = [b[0].weight.register_hook(lambda g, k=k: seen.append(k))
               for k, b in enumerate(model.branches)]
    model(x).sum().backward()
    for h in handles:
        h.remove()
    model.zero_grad()
    return seen


def local_grads(model, x, y):
    m = copy.deepcopy(model)
    m.zero_grad()
    torch.nn.functional.mse_loss(m(x), y).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad for p in m.parameters()]


torch.manual_seed(1234)
model = Branchy()
torch.manual_seed(99 + r)  # different data on every rank
orders = hvd.allgather_object(hook_order(model, torch.randn(2, 8)))
if n > 1:
    assert len({tuple(o) for o in orders}) > 1, f"hook orders did not differ: {orders}"

opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named_parameters=model.named_parameters())
assert isinstance(opt, torch.optim.SGD)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
assert identical_across_ranks(model)

# One step checked against the average of every rank's local gradients.
x, y = torch.randn(16, 8), torch.randn(16, 1)
mine = local_grads(model, x, y)
everyone = hvd.allgather_object(mine)
want = [sum(g[i] for g in everyone) / n for i in range(len(mine))]
opt.zero_grad()
torch.nn.functional.mse_loss(model(x), y).backward()
if n > 1:
    try:
        opt.zero_grad()
    except AssertionError as e:
        assert "zero_grad() between backward() and step()" in str(e), e
    else:
        raise AssertionError("zero_grad between backward and step did not raise")
opt.synchronize()
for p, w in zip(model.parameters(), want):
    got = torch.zeros_like(p) if p.grad is None else p.grad
    assert torch.allclose(got, w, atol=1e-6), (got, w)
with opt.skip_synchronize():
    opt.step()

# Many steps: parameters stay bit-identical on every rank.
for step in range(STEPS):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if step % 10 == 9:
        assert identical_across_ranks(model), f"parameters differ after step {step}"
assert identical_across_ranks(model)

# backward_passes_per_step=2: two local passes, one reduction of their sum.
model2 = copy.deepcopy(model)
opt2 = hvd.DistributedOptimizer(torch.optim.SGD(model2.parameters(), lr=0.01),
                                named_parameters=model2.named_parameters(),
                                backward_passes_per_step=2)
xs = [torch.randn(4, 8) for _ in range(3)]
ys = [torch.randn(4, 1) for _ in range(3)]
a = local_grads(model2, xs[0], ys[0])
b = local_grads(model2, xs[1], ys[1])
everyone = hvd.allgather_object([ga + gb for ga, gb in zip(a, b)])
want = [sum(g[i] for g in everyone) / n for i in range(len(a))]
opt2.zero_grad()
for i in range(2):
    torch.nn.functional.mse_loss(model2(xs[i]), ys[i]).backward()
opt2.synchronize()
for p, w in zip(model2.parameters(), want):
    got = torch.zeros_like(p) if p.grad is None else p.grad
    assert torch.allclose(got, w, atol=1e-5), (got, w)

# A third pass before step() is an error (on a model every rank uses entirely, so every
# rank has submitted the same buckets when it is raised); load_state_dict() recovers.
lin = torch.nn.Linear(5, 5)
hvd.broadcast_parameters(lin.state_dict(), 0)
opt5 = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=0.01),
                                backward_passes_per_step=2)
for i in range(2):
    lin(torch.randn(2, 5)).sum().backward()
if n > 1:
    try:
        lin(torch.randn(2, 5)).sum().backward()
    except (AssertionError, RuntimeError) as e:
        assert "backward_passes_per_step" in str(e), e
    else:
        raise AssertionError("a third backward pass did not raise")
    opt5.load_state_dict(opt5.state_dict())  # forgets the passes in flight
    opt5.zero_grad()
    for i in range(2):
        lin(torch.randn(2, 5)).sum().backward()
opt5.step()
assert identical_across_ranks(lin)

# op=Sum and gradient_predivide_factor.
for kwargs, scale in (({"op": hvd.Sum}, n), ({"gradient_predivide_factor": 2.0}, 1)):
    m = copy.deepcopy(model)
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.01),
                                 named_parameters=m.named_parameters(), **kwargs)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    everyone = hvd.allgather_object(local_grads(m, x, y))
    want = [sum(g[i] for g in everyone) / n * scale for i in range(len(everyone[0]))]
    o.zero_grad()
    torch.nn.functional.mse_loss(m(x), y).backward()
    o.synchronize()
    for p, w in zip(m.parameters(), want):
        got = torch.zeros_like(p) if p.grad is None else p.grad
        assert torch.allclose(got, w, atol=1e-5), (kwargs, got, w)

# fp16 compression: results close to the exact average, identical across ranks.
model3 = copy.deepcopy(model)
opt3 = hvd.DistributedOptimizer(torch.optim.SGD(model3.parameters(), lr=0.05),
                                named_parameters=model3.named_parameters(),
                                compression=hvd.Compression.fp16)
x, y = torch.randn(16, 8), torch.randn(16, 1)
everyone = hvd.allgather_object(local_grads(model3, x, y))
want = [sum(g[i] for g in everyone) / n for i in range(len(everyone[0]))]
opt3.zero_grad()
torch.nn.functional.mse_loss(model3(x), y).backward()
opt3.synchronize()
for p, w in zip(model3.parameters(), want):
    got = torch.zeros_like(p) if p.grad is None else p.grad
    assert got.dtype == torch.float32
    assert torch.allclose(got, w, rtol=1e-2, atol=1e-3), (got, w)
with opt3.skip_synchronize():
    opt3.step()
for _ in range(5):
    opt3.zero_grad()
    torch.nn.functional.mse_loss(model3(torch.randn(16, 8)), torch.randn(16, 1)).backward()
    opt3.step()
assert identical_across_ranks(model3)

# Without named_parameters, and a step with no backward at all (every gradient zero).
model4 = torch.nn.Linear(3, 3)
hvd.broadcast_parameters(model4.state_dict(), 0)
opt4 = hvd.DistributedOptimizer(torch.optim.SGD(model4.parameters(), lr=0.1))
opt4.step()
assert identical_across_ranks(model4)

hvd.shutdown()
print(f"rank {r}: optimizer checks passed")
