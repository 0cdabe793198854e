"""One rank checking that collectives agree before they move (hvdrun.torch over
libhvdrun's negotiation). Modes (argv[1]):

  mismatch  every kind of disagreement raises HorovodInternalError on every rank, naming
            both sides; the program catches it and the next collective succeeds
  names     named collectives meet in any submission order; a name in flight is refused
  join      uneven batches: ranks join after different numbers of steps; joined ranks
            stand in; every rank ends with the same weights; join returns the last rank
  reinit    init/shutdown ten times in one process, then a collective
  stall     rank 1 never submits what rank 0 waits for (HOROVOD_STALL_CHECK_TIME_SECONDS)

Prints "rank R: negotiation checks passed" at the end of a mode that ends normally."""
import os
import sys
import time

import torch

import hvdrun
import hvdrun.torch as hvd

mode = sys.argv[1]


def expect_error(fn, *parts):
    """Runs fn, which must raise HorovodInternalError (a RuntimeError) containing parts."""
    try:
        fn()
    except hvd.HorovodInternalError as e:
        assert isinstance(e, RuntimeError)
        for p in parts:
            assert p in str(e), f"{p!r} not in {e}"
        return str(e)
    raise AssertionError(f"no error; expected one containing {parts}")


def mismatch():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    # Size: rank 0 has 10 elements, the others 3.
    msg = expect_error(lambda: hvd.allreduce(torch.ones(10 if r == 0 else 3), name="grad.fc1"),
                       "allreduce 'grad.fc1': rank 0 has float32[10], rank 1 has float32[3]")
    # One prefix, the caller's, and the class by its public name: Horovod's, a kind of
    # hvdrun's own error.
    assert msg.startswith("hvdrun.torch.allreduce: allreduce 'grad.fc1'"), msg
    cls = hvd.HorovodInternalError
    assert f"{cls.__module__}.{cls.__qualname__}" == "hvdrun.HorovodInternalError", cls
    assert issubclass(cls, hvdrun.HvdrunError) and issubclass(cls, RuntimeError), cls.__mro__
    # Shape with the same element count.
    expect_error(lambda: hvd.allreduce(torch.ones((2, 3) if r == 0 else (3, 2))),
                 "rank 0 has float32[2, 3], rank 1 has float32[3, 2]")
    # Dtype.
    expect_error(lambda: hvd.allreduce(torch.ones(4, dtype=torch.int32 if r == 0 else torch.float32)),
                 "rank 0 has int32[4], rank 1 has float32[4]")
    # Op.
    expect_error(lambda: hvd.allreduce(torch.ones(4), op=hvd.Sum if r == 0 else hvd.Max),
                 "rank 0 reduces with Sum, rank 1 with Max")
    # Scale factors.
    expect_error(lambda: hvd.allreduce(torch.ones(4), op=hvd.Sum,
                                       postscale_factor=1.0 if r == 0 else 2.0),
                 "postscale_factor")
    # Broadcast root.
    expect_error(lambda: hvd.broadcast(torch.ones(4), 0 if r == 0 else 1, name="w"),
                 "broadcast 'w': rank 0 broadcasts from root 0, rank 1 from root 1")
    # Broadcast shape.
    expect_error(lambda: hvd.broadcast(torch.ones(5 if r == 0 else 6), 0),
                 "rank 0 has float32[5], rank 1 has float32[6]")
    # Allgather: trailing dimensions must agree (the first may differ).
    expect_error(lambda: hvd.allgather(torch.ones((r + 1, 4 if r == 0 else 5))),
                 "only the first dimension may differ")
    expect_error(lambda: hvd.allgather(torch.ones(2, dtype=torch.float64 if r else torch.float32)),
                 "rank 0 has float32[2], rank 1 has float64[2]")
    # Kind: an allgather on one rank against a barrier on another.
    if r == 0:
        expect_error(lambda: hvd.allgather(torch.ones(1)), "submitted allgather", "barrier")
    else:
        expect_error(hvd.barrier, "submitted allgather", "barrier")
    # Every mismatch left the job healthy: the next collectives are right.
    total = hvd.allreduce(torch.full((5,), float(r + 1)), op=hvd.Sum)
    assert torch.equal(total, torch.full((5,), float(n * (n + 1) / 2))), total
    g = hvd.allgather(torch.full((r + 1, 2), float(r)))
    assert g.shape == (n * (n + 1) // 2, 2)
    print(f"rank {r}: sample message: {msg}")
    led_mismatch(r, n)
    # fp16 scaling happens in float32, as in Horovod: 0.1 * 3 rounds once.
    x = torch.full((4,), 3.0, dtype=torch.float16)
    y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.1, postscale_factor=1.0 / n)
    want = (torch.full((4,), 3.0).mul(0.1)).half().float().mul(n).mul(1.0 / n).half()
    assert torch.equal(y, want), (y, want)
    hvd.shutdown()


def led_mismatch(r, n):
    """Inputs too large to ride in a round, both already agreed once (cached): on one host
    the brief rides in the data's first step. A rank that sends other data must make every
    rank refuse before anything is reduced; in place, the input stays as it was."""
    small, large = 20000, 30000  # float32: 80 KB and 120 KB
    for count in (small, large):
        hvd.allreduce(torch.ones(count), name="led", op=hvd.Sum)
    x = torch.full((small if r == 0 else large,), float(r + 1))
    expect_error(lambda: hvd.allreduce_(x, name="led", op=hvd.Sum),
                 f"rank 0 has float32[{small}], rank 1 has float32[{large}]")
    assert torch.equal(x, torch.full_like(x, float(r + 1))), x
    y = hvd.allreduce(torch.full((large,), float(r + 1)), name="led", op=hvd.Average,
                      prescale_factor=2.0, postscale_factor=0.5)
    assert torch.equal(y, torch.full((large,), (n + 1) / 2)), y


def names():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    keys = ["a", "b", "c", "d"]
    order = keys[r % 4:] + keys[: r % 4]  # every rank submits in its own order
    handles = {k: hvd.allreduce_async(torch.full((3,), float(r)), name=k, op=hvd.Sum)
               for k in order}
    for k in keys:
        out = hvd.synchronize(handles[k])
        assert torch.equal(out, torch.full((3,), float(n * (n - 1) / 2))), (k, out)
    # A second collective with the name of one in flight is refused with ValueError.
    h = hvd.allreduce_async(torch.ones(2), name="dup")
    try:
        hvd.allreduce_async(torch.ones(2), name="dup")
        raise AssertionError("duplicate name accepted")
    except ValueError as e:
        assert "still in flight" in str(e), e
    hvd.synchronize(h)
    # Allgathers synchronized in different orders on different ranks still meet.
    ga = hvd.allgather_async(torch.full((r + 1,), 1.0), name="ga")
    gb = hvd.allgather_async(torch.full((2,), 2.0), name="gb")
    first, second = (ga, gb) if r % 2 == 0 else (gb, ga)
    hvd.synchronize(first)
    hvd.synchronize(second)
    hvd.shutdown()


def join():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    torch.manual_seed(1 + r)
    w_true = torch.arange(8, dtype=torch.float32).unsqueeze(1) / 8
    steps = 20 + 7 * r  # uneven batches: rank r has 7r more
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 8)
        loss = (model(x) - x @ w_true).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    last = hvd.join()
    assert last == n - 1, last  # the rank with the most batches joins last
    assert losses[-1] < losses[0], losses
    # The rank that joined last took every step: its weights are the model's (a joined
    # rank's optimizer stops stepping when it joins, as in Horovod).
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).unsqueeze(0)
    everyone = hvd.allgather(flat)
    assert all(torch.equal(everyone[0], row) for row in everyone), "weights differ"
    # Min/Max stand-ins are the op's identity, Average still divides by size().
    if r == 0:
        hvd.join()
    else:
        mx = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Max)
        mn = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Min)
        avg = hvd.allreduce(torch.tensor([float(n)]), op=hvd.Average)
        assert mx.item() == n - 1 and mn.item() == 1, (mx, mn)
        assert abs(avg.item() - (n - 1)) < 1e-6, avg
        hvd.join()
    hvd.shutdown()


def reinit():
    r = None
    for i in range(10):
        hvd.init()
        r, n = hvd.rank(), hvd.size()
        s = hvd.allreduce(torch.tensor([float(i)]), op=hvd.Sum)
        assert s.item() == i * n, (i, s)
        hvd.shutdown()
        assert not hvd.is_initialized()
    hvd.init()
    out = hvd.allgather(torch.tensor([r]))
    assert out.tolist() == list(range(hvd.size())), out
    hvd.shutdown()


def stall():
    hvd.init()
    r = hvd.rank()
    if r == 0:
        try:
            hvd.allreduce(torch.ones(2), name="waiting.for.rank1")
        except hvd.HorovodInternalError:
            pass  # the job ends below, through rank 1
    else:
        time.sleep(6)  # longer than HOROVOD_STALL_CHECK_TIME_SECONDS
        hvd.allreduce(torch.ones(2), name="waiting.for.rank1")
    hvd.shutdown()


{"mismatch": mismatch, "names": names, "join": join, "reinit": reinit, "stall": stall}[mode]()
print(f"rank {os.environ['HVDRUN_RANK']}: negotiation checks passed")
