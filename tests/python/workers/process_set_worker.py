"""One rank checking process sets (hvdrun.torch): sets of different shapes (even and odd
ranks, one host's ranks, one rank per host, overlapping sets, a set of one), every
collective in them against single-process values, gradients, DistributedOptimizer in a
set (and on a rank outside it, where it is the wrapped optimizer alone), a duplicate
refused, removal, and the whole job's collectives afterwards.
Prints "rank R: process set checks passed" at the end."""
import os

import torch
from _checks import expect_raises

import hvdrun.torch as hvd

# As in Horovod: init() with a set twice raises once the job is up, the first entry named
# and the repeat refused. At np 1, [0] is every rank, the global set: refused already.
first = hvd.ProcessSet([0])
expect_raises(ValueError, lambda: hvd.init(process_sets=[first, hvd.ProcessSet([0])]),
              "is a duplicate")
r, n = hvd.rank(), hvd.size()
assert hvd.is_initialized() and (first.process_set_id is None) == (n == 1), first
if n > 1:
    # Initialising again with the sets as they are names them again.
    again = hvd.ProcessSet([0])
    hvd.init(process_sets=[again])
    assert again.process_set_id == first.process_set_id > 0, (again, first)
local = int(os.environ["HVDRUN_LOCAL_RANK"])
cross = int(os.environ["HVDRUN_CROSS_RANK"])

# Which host every rank is on, to build sets of one host and of one rank per host.
hosts = hvd.allgather(torch.tensor([[cross, local]])).tolist()
shapes = {
    "even": [k for k in range(n) if k % 2 == 0],
    "odd": [k for k in range(n) if k % 2 == 1],
    "first host": [k for k in range(n) if hosts[k][0] == hosts[0][0]],
    "one per host": [k for k in range(n) if hosts[k][1] == 0],
    "overlapping": list(range(min(n, 2), n)) + [0],
}
sets = {}
for label, ranks in shapes.items():
    if not ranks or sorted(ranks) in [[0], list(range(n))] + [s.ranks for s in sets.values()]:
        continue
    sets[label] = hvd.add_process_set(ranks)


def check(label, ps):
    members, me = ps.ranks, ps.rank()
    assert ps.size() == len(members) and members[me] == r and ps.included()
    t = torch.arange(6, dtype=torch.float32) * (r + 1)
    total = sum(k + 1 for k in members)
    got = hvd.allreduce(t, op=hvd.Sum, process_set=ps, name=f"{label}.sum")
    assert torch.equal(got, torch.arange(6, dtype=torch.float32) * total), (label, got)
    avg = hvd.allreduce(torch.ones(1 << 18) * (r + 1), process_set=ps)
    assert torch.allclose(avg, torch.full((1 << 18,), total / len(members))), label
    root = members[-1]
    b = hvd.broadcast(torch.tensor([float(r), 2.0]), root, process_set=ps)
    assert b.tolist() == [float(root), 2.0], (label, b)
    g = hvd.allgather(torch.full((r % 3 + 1, 2), r), process_set=ps)
    assert g.tolist() == sum(([[k, k]] * (k % 3 + 1) for k in members), []), (label, g)
    a, received = hvd.alltoall(torch.arange(2 * len(members)) + 100 * r,
                               splits=[2] * len(members), process_set=ps)
    assert received.tolist() == [2] * len(members)
    assert a.tolist() == sum(([100 * k + 2 * me, 100 * k + 2 * me + 1] for k in members), [])
    rs = hvd.reducescatter(torch.ones(2 * len(members) + 1, 3) * (r + 1), op=hvd.Sum,
                           process_set=ps)
    assert torch.all(rs == total) and rs.shape[0] == 2 + (1 if me == 0 else 0), (label, rs)
    # Gradient of a Sum allreduce inside the set: the output's gradient summed over the set.
    w = torch.ones(3, requires_grad=True)
    (hvd.allreduce(w * (r + 1), op=hvd.Sum, process_set=ps).sum()).backward()
    assert torch.equal(w.grad, torch.full((3,), float(len(members) * (r + 1)))), (label, w.grad)
    # DistributedOptimizer over the set: its members end with the same weights.
    torch.manual_seed(r)
    model = torch.nn.Linear(4, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(hvd.broadcast(p, members[0], process_set=ps))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=ps)
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4) * (r + 1)).pow(2).mean().backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0), process_set=ps)
    assert torch.allclose(every, flat.expand_as(every)), (label, every)
    assert hvd.broadcast_object({"from": members[0]}, members[0], process_set=ps) == \
        {"from": members[0]}
    hvd.barrier(process_set=ps)


for label, ps in sets.items():
    if ps.included():
        check(label, ps)
    else:
        assert ps.rank() == -1 and not ps.included()
        try:
            hvd.allreduce(torch.ones(1), process_set=ps)
            raise AssertionError("a rank outside a set ran its collective")
        except ValueError as e:  # Horovod's invalid argument: the job goes on
            assert "is not in process set" in str(e), e
        # DistributedOptimizer over a set this rank is not in: as in Horovod, its step() is
        # the wrapped optimizer's alone, with no collective and no error.
        torch.manual_seed(100 + r)
        model, twin = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
        twin.load_state_dict(model.state_dict())
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), process_set=ps)
        x = torch.randn(8, 4)
        for m, o in ((model, opt), (twin, torch.optim.SGD(twin.parameters(), lr=0.1))):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters())), label
    hvd.barrier()

# The set of one given to init() exists: adding it again is refused on every rank. So is
# a set of every rank: the global set's ranks (Horovod refuses it too).
expect_raises(ValueError, lambda: hvd.add_process_set([0]), "duplicate")
expect_raises(ValueError, lambda: hvd.add_process_set(list(range(n))),
              "the global process set (0)")
for ps in sets.values():
    assert hvd.remove_process_set(ps)
    assert ps.process_set_id is None
assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [float(n)] * 3
print(f"rank {r}: process set checks passed", flush=True)
