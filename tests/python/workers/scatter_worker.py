"""One rank checking alltoall and reducescatter (hvdrun.torch over libhvdrun): values
against what a single process computes, uneven splits and rows, every dtype family,
gradients, a mismatch that fails on every rank while the job goes on, and async handles.
Prints "rank R: scatter checks passed" at the end."""
import torch

import hvdrun.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()


def rows_of(rank, j):
    """What rank `rank` sends rank j: j + 1 rows of [rank, j, k]."""
    return [[rank, j, k] for k in range(j + 1)]


# alltoall with uneven splits, for several dtypes and 1 to 3 dimensions.
for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8,
              torch.int8, torch.float16, torch.bfloat16):
    send = torch.tensor(sum((rows_of(r, j) for j in range(n)), []), dtype=dtype)
    for extra in range(3):
        t = send
        for _ in range(extra):
            t = torch.stack([t, t], dim=-1)
        out, received = hvd.alltoall(t, splits=torch.tensor([j + 1 for j in range(n)],
                                                            dtype=torch.int32))
        assert received.tolist() == [r + 1] * n, received
        expect = torch.tensor(sum((rows_of(i, r) for i in range(n)), []), dtype=dtype)
        for _ in range(extra):
            expect = torch.stack([expect, expect], dim=-1)
        assert torch.equal(out, expect), (dtype, extra, out, expect)

# Splits that send nothing to some ranks, and a rank that sends nothing at all.
send_rows = [0 if (r + j) % 2 else 2 for j in range(n)] if r != n - 1 else [0] * n
t = torch.arange(sum(send_rows) * 4, dtype=torch.float32).reshape(-1, 4) + 1000 * r
out, received = hvd.alltoall(t, splits=send_rows)
expect_rows = [0 if (i + r) % 2 or i == n - 1 else 2 for i in range(n)]
assert received.tolist() == expect_rows, (received, expect_rows)
parts = []
for i in range(n):
    rows_i = [0 if (i + j) % 2 else 2 for j in range(n)] if i != n - 1 else [0] * n
    first = sum(rows_i[:r])
    parts.append(torch.arange(sum(rows_i) * 4, dtype=torch.float32).reshape(-1, 4)[first:first + rows_i[r]] + 1000 * i)
assert torch.equal(out, torch.cat(parts)), (out, parts)

# Equal splits, large enough to cross the segment in many steps.
big = torch.arange(n * 200003, dtype=torch.int64) + 10**9 * r
out = hvd.alltoall(big)
assert torch.equal(out, torch.cat([torch.arange(r * 200003, (r + 1) * 200003) + 10**9 * i
                                   for i in range(n)]))

# Gradient: alltoall back with the received splits.
x = torch.ones(n * 2, 3, requires_grad=True)
y, _ = hvd.alltoall(x * (r + 1), splits=[2] * n)
(y * torch.arange(1, y.shape[0] + 1).unsqueeze(1)).sum().backward()
# Row k of my input went to rank k // 2 as its row 2 * r + k % 2.
expect = torch.tensor([[(2 * r + k % 2 + 1) * (r + 1)] * 3 for k in range(n * 2)],
                      dtype=torch.float32)
assert torch.equal(x.grad, expect), (x.grad, expect)

# reducescatter: uneven rows (ranks below rows % n get one more), Sum and Average.
for rows in (1, n - 1, 7, 4 * n + 3):
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.int8):
        base = torch.arange(rows * 5, dtype=torch.int64).reshape(rows, 5) % 7
        t = (base * (r + 1)).to(dtype)
        got = hvd.reducescatter(t, op=hvd.Sum)
        sizes = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
        start = sum(sizes[:r])
        full = (base * sum(range(1, n + 1))).to(dtype)
        assert got.shape == (sizes[r], 5) and torch.equal(got, full[start:start + sizes[r]]), \
            (rows, dtype, got, full)
    avg = hvd.reducescatter(torch.ones(rows, 2) * (r + 1))
    assert torch.allclose(avg, torch.ones(avg.shape) * (n + 1) / 2), avg

# Large: many steps through the segment; prescale and postscale.
big = torch.ones(1 << 20) * (r + 1)
got = hvd.reducescatter(big, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
assert got.numel() == (1 << 20) // n + (1 if r < (1 << 20) % n else 0)
assert torch.all(got == n * (n + 1) / 2), got

# Gradient as Horovod defines it: an allgather of the output's gradient (times size for Sum).
p = torch.ones(3 * n, 2, requires_grad=True)
(hvd.reducescatter(p, op=hvd.Sum) * (r + 1)).sum().backward()
expect = torch.cat([torch.full((3, 2), float((i + 1) * n)) for i in range(n)])
assert torch.equal(p.grad, expect), p.grad

# Grouped and async.
g = hvd.grouped_reducescatter([torch.ones(n, 2) * r, torch.ones(2 * n) * r], op=hvd.Sum)
assert torch.equal(g[0], torch.full((1, 2), float(sum(range(n)))))
assert torch.equal(g[1], torch.full((2,), float(sum(range(n)))))
h1 = hvd.reducescatter_async(torch.ones(n) * r, name="rs.async", op=hvd.Sum)
h2 = hvd.alltoall_async(torch.full((n,), float(r)), name="a2a.async")
out, received = hvd.synchronize(h2)
assert out.tolist() == [float(i) for i in range(n)] and received.tolist() == [1] * n
assert hvd.synchronize(h1).tolist() == [float(sum(range(n)))]

# Mismatches fail on every rank, naming both sides, and the job goes on.
if n > 1:
    try:
        hvd.alltoall(torch.ones(n, 3 + (r == 1)), name="a2a.bad")
        raise AssertionError("alltoall with different trailing dimensions did not raise")
    except hvd.HorovodInternalError as e:
        assert "rank 0 has float32" in str(e) and "rank 1 has float32" in str(e), e
    try:
        hvd.reducescatter(torch.ones(4 + (r == 1), 2), name="rs.bad")
        raise AssertionError("reducescatter with different shapes did not raise")
    except hvd.HorovodInternalError as e:
        assert "reducescatter 'rs.bad'" in str(e) and "rank 1 has float32[5, 2]" in str(e), e
for bad in (lambda: hvd.alltoall(torch.ones(n + 1)) if n > 1 else None,
            lambda: hvd.alltoall(torch.ones(n), splits=[2] * n),
            lambda: hvd.alltoall(torch.ones(n), splits=torch.ones(n))):
    try:
        bad()
        assert n == 1, "bad splits were accepted"
    except ValueError:
        pass
try:
    hvd.reducescatter(torch.tensor(1.0))
    raise AssertionError("a scalar reducescatter did not raise")
except ValueError:
    pass
try:
    hvd.reducescatter(torch.ones(n), op=hvd.Max)
    raise AssertionError("reducescatter with Max did not raise")
except RuntimeError:
    pass
assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == n
print(f"rank {r}: scatter checks passed", flush=True)
