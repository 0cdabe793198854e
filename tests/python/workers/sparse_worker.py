"""One rank checking sparse tensors: sparse_allreduce_async against the dense sum (or
average) of every rank's tensor computed here in one process (every rank builds every
rank's tensor from the rank's seed), for 1 and 2 sparse dimensions, a rank with no
entries, int64 values, and its errors; then nn.Embedding(sparse=True) trained through
DistributedOptimizer, with and without sparse_as_dense, next to dense layers in the same
bucket, with backward_passes_per_step=2 and a step where one rank's embedding has no
gradient: every rank ends with the same weights, equal to the same training run in one
process on every rank's batch. Argument: the device, cpu (default) or cuda (as
workers/sync_bn_worker.py). Prints "rank R: sparse checks passed"."""
import copy
import time

import torch
from _checks import device_argument, expect_raises, pin_device

import hvdrun.torch as hvd

DEV = device_argument("sparse")
hvd.init()
r, n = hvd.rank(), hvd.size()
pin_device(DEV, hvd.local_rank())


def rank_tensor(k, shape, sparse_dims, dtype=torch.float32, empty=False):
    """Rank k's sparse tensor: about a fifth of its entries (rows for a hybrid tensor)
    are set."""
    g = torch.Generator().manual_seed(1000 + k)
    dense = torch.rand(shape, generator=g)
    keep = torch.rand(shape[:sparse_dims], generator=g) < 0.2
    if empty:
        keep[...] = False
    dense[~keep] = 0
    if dtype == torch.int64:
        dense = (dense * 100).to(torch.int64)
    return dense.to_sparse(sparse_dims)


cases = [((17, 10), 2, torch.float32, None), ((81, 4), 1, torch.float32, None),
         ((12, 3, 2), 1, torch.float64, None), ((30, 6), 2, torch.int64, None),
         ((15, 5), 2, torch.float32, 0)]  # rank 0 contributes no entries
handles = []
for i, (shape, sparse_dims, dtype, empty_rank) in enumerate(cases):
    for op in (hvd.Average, hvd.Sum):
        mine = rank_tensor(r, shape, sparse_dims, dtype, empty=(r == empty_rank)).to(DEV)
        handles.append((i, op, hvd.sparse_allreduce_async(mine, name=f"sparse.{i}.{op}", op=op)))
for i, op, h in handles:
    shape, sparse_dims, dtype, empty_rank = cases[i]
    got = h()
    assert h() is got  # a second call returns the same tensor
    assert got.device.type == DEV, got.device
    got = got.cpu()
    assert got.is_sparse and got.shape == torch.Size(shape), (i, got.layout, got.shape)
    assert got.sparse_dim() == sparse_dims, (i, got.sparse_dim())
    expected = sum(rank_tensor(k, shape, sparse_dims, dtype, empty=(k == empty_rank)).to_dense()
                   for k in range(n))
    if op == hvd.Average:
        expected = expected / n
    if dtype == torch.int64 and op == hvd.Sum:
        assert torch.equal(got.to_dense(), expected), i
    else:
        assert torch.allclose(got.to_dense(), expected.to(got.dtype), rtol=1e-6, atol=1e-6), \
            (i, op, (got.to_dense() - expected).abs().max())

# Horovod's own check: the average of sparse tensors equals allreduce of the dense ones.
tensors = [rank_tensor(r * 50 + i, (d0, 10), 2).to(DEV)
           for i, d0 in enumerate([17, 32, 81, 12, 15])]
dense = [hvd.allreduce(t.to_dense()) for t in tensors]
sparse = [hvd.sparse_allreduce_async(t, op=hvd.Average, name=str(i)) for i, t in enumerate(tensors)]
for d, h in zip(dense, sparse):
    assert torch.allclose(d, h().to_dense(), 1e-6)

# Many at once, one rank submitting slower than the others: nothing stalls (an allgather's
# second step enters each rank's queue at a different moment; left in flight, 30 of them
# would leave the ranks' queues too far apart to agree).
many = []
for i in range(30):
    many.append(hvd.sparse_allreduce_async(rank_tensor(r + 7 * i, (9, 4), 1).to(DEV),
                                           name=f"many.{i}", op=hvd.Sum))
    if r == 1:
        time.sleep(0.002)
for i, h in enumerate(many):
    expected = sum(rank_tensor(k + 7 * i, (9, 4), 1).to_dense() for k in range(n))
    assert torch.allclose(h().to_dense().cpu(), expected, rtol=1e-6, atol=1e-6), i


expect_raises(TypeError, lambda: hvd.sparse_allreduce_async(torch.ones(3), "d", hvd.Sum),
              "sparse COO", "allreduce_async")
expect_raises(ValueError, lambda: hvd.sparse_allreduce_async(torch.ones(3).to_sparse(), "m",
                                                             hvd.Max), "Average", "Sum")
expect_raises(NotImplementedError, lambda: hvd.allreduce(torch.ones(2).to_sparse()),
              "sparse_allreduce_async")

# Training an embedding with sparse gradients.
ROWS, DIM = 20, 3


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.embedding = torch.nn.Embedding(ROWS, DIM, sparse=True)
        self.dense = torch.nn.Linear(DIM, 1)
        self.other = torch.nn.Embedding(ROWS, DIM, sparse=True)

    def forward(self, x, use_other=True):
        h = self.embedding(x).sum(1)
        if use_other:
            h = h + self.other(x).sum(1)
        return self.dense(h)


def batch(step, k):
    g = torch.Generator().manual_seed(step * 100 + k)
    return torch.randint(0, ROWS, (2 + k, 4), generator=g).to(DEV)  # sizes differ by rank


def train(sparse_as_dense, make_opt, passes, set_to_none=False, steps=4):
    model = Net().to(DEV)
    single = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(make_opt(model), named_parameters=model.named_parameters(),
                                   sparse_as_dense=sparse_as_dense,
                                   backward_passes_per_step=passes)
    ref_opt = make_opt(single)
    for step in range(steps):
        # In step 1, rank 1 does not use `other`: it contributes an empty sparse gradient.
        # zero_grad() keeps an empty sparse gradient (every dimension sparse); with
        # set_to_none the unused embedding has none: either way its gather must agree.
        opt.zero_grad(set_to_none=set_to_none)
        for p in range(passes):
            model(batch(step * passes + p, r), use_other=not (step == 1 and r == 1)).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        for p in range(passes):
            # The average over ranks of every rank's loss, in one process.
            loss = sum(single(batch(step * passes + p, k), use_other=not (step == 1 and k == 1)).sum()
                       for k in range(n)) / n
            loss.backward()
        ref_opt.step()
        assert model.embedding.weight.grad.is_sparse and model.other.weight.grad.is_sparse
    what = f"sparse_as_dense={sparse_as_dense}, passes={passes}, set_to_none={set_to_none}"
    for (name, p), q in zip(model.named_parameters(), single.parameters()):
        assert torch.allclose(p.detach(), q.detach(), rtol=1e-5, atol=1e-6), \
            f"{name}, {what}: {(p.detach() - q.detach()).abs().max()}"
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
    everyone = hvd.allgather(flat)
    assert all(torch.equal(everyone[0], row) for row in everyone), \
        f"weights differ between ranks, {what}"


def sgd(m):
    return torch.optim.SGD(m.parameters(), lr=0.1)


for sparse_as_dense in (False, True):
    train(sparse_as_dense, sgd, passes=1)
    train(sparse_as_dense, sgd, passes=2)
    train(sparse_as_dense, sgd, passes=1, set_to_none=True)

# Horovod's test_sparse_embeddings: SparseAdam, inputs of different lengths per rank.
for sparse_as_dense in (False, True):
    torch.manual_seed(3)
    emb = torch.nn.Embedding(10, 3, sparse=True).to(DEV)
    inp = torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if r == 0 else \
        torch.LongTensor([[1, 3, 4], [4, 7, 9]])
    inp = inp.to(DEV)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                   sparse_as_dense=sparse_as_dense)
    opt.zero_grad()
    emb(inp).sum().backward()
    opt.step()
    everyone = hvd.allgather(emb.weight.detach().reshape(1, -1))
    assert all(torch.equal(everyone[0], row) for row in everyone), sparse_as_dense

print(f"rank {r}: sparse checks passed", flush=True)
