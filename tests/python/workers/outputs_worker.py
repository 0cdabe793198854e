"""One rank checking hvd.allreduce's prepared common case and its pooled large outputs
against values it can predict (rank r contributes r + 1). Prints "rank R: outputs checks
passed" at the end; any failed check raises, which fails the job."""
import threading

import torch
from _checks import expect_raises

import hvdrun.torch as hvd
from hvdrun.torch import _outputs

hvd.init()
r, n = hvd.rank(), hvd.size()
mine, total = float(r + 1), n * (n + 1) / 2

# One shape, several ops and dtypes in turn: each call gets its own prepared description.
x = torch.full((3, 2), mine)
for _ in range(3):
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum), torch.full((3, 2), total))
    assert torch.equal(hvd.allreduce(x, op=hvd.Max), torch.full((3, 2), float(n)))
    assert torch.allclose(hvd.allreduce(x), torch.full((3, 2), total / n))
    assert torch.equal(hvd.allreduce(x, name="x.sum", op=hvd.Sum), torch.full((3, 2), total))
    i = torch.full((3, 2), r + 1, dtype=torch.int32)
    got = hvd.allreduce(i, op=hvd.Sum)
    assert got.dtype == torch.int32 and torch.equal(got, torch.full((3, 2), int(total),
                                                                     dtype=torch.int32))
    # The same dtype and shape, not contiguous: the general path, the same result.
    t = torch.full((2, 3), mine).t()
    assert torch.equal(hvd.allreduce(t, op=hvd.Sum), torch.full((3, 2), total))
    # An op hvdrun lacks raises every time (nothing is cached for it).
    expect_raises(NotImplementedError, lambda: hvd.allreduce(x, op=2), "Adasum")
    # Deprecated average= and scale factors take the general path.
    assert torch.equal(hvd.allreduce(x, average=False), torch.full((3, 2), total))
    assert torch.allclose(hvd.allreduce(x, op=hvd.Sum, postscale_factor=2.0),
                          torch.full((3, 2), 2 * total))
    assert torch.equal(x, torch.full((3, 2), mine)), "allreduce modified its input"

# A tensor that records its gradient takes the autograd path and still gets one.
w = torch.full((4,), mine, requires_grad=True)
hvd.allreduce(w, op=hvd.Sum).sum().backward()
assert torch.equal(w.grad, torch.full((4,), float(n)))

# Large outputs: from the pool, a new tensor each call, the input left alone.
hvd.shutdown()
hvd.init()
assert _outputs.pooled_count() == (0, 0)
elems = _outputs.POOLED_FROM // 4 * 2  # 32 MiB of float32
big = torch.full((elems,), mine)
out = hvd.allreduce(big, op=hvd.Sum)
assert out.data_ptr() != big.data_ptr() and out.shape == big.shape and out.is_contiguous()
assert torch.equal(out, torch.full((elems,), total))
assert torch.equal(big, torch.full((elems,), mine)), "allreduce modified its input"
assert _outputs.pooled_count() == (1, 0), _outputs.pooled_count()
first = out.data_ptr()
del out
assert _outputs.pooled_count() == (1, 1), _outputs.pooled_count()
out = hvd.allreduce(big, op=hvd.Sum)
assert out.data_ptr() == first, "a freed output was not reused"
assert torch.equal(out, torch.full((elems,), total))

# A view outliving its tensor keeps the memory out of the pool until it goes too.
view = out[-4:]
del out
assert _outputs.pooled_count() == (1, 0), _outputs.pooled_count()
other = hvd.allreduce(big * 2, op=hvd.Sum)
assert other.data_ptr() != first and torch.equal(other, torch.full((elems,), 2 * total))
assert torch.equal(view, torch.full((4,), total)), "a live view's memory was reused"
del view, other
assert _outputs.pooled_count() == (2, 2), _outputs.pooled_count()

# The async, autograd and broadcast paths draw from the pool as well; shapes and dtypes are kept.
h = hvd.allreduce_async(big.view(2, -1), op=hvd.Max)
got = hvd.synchronize(h)
assert got.shape == (2, elems // 2) and torch.equal(got, torch.full((2, elems // 2), float(n)))
del got
g = torch.full((elems,), mine, requires_grad=True)
res = hvd.allreduce(g, op=hvd.Sum)
assert res.requires_grad and torch.equal(res.detach(), torch.full((elems,), total))
res.sum().backward()
assert torch.equal(g.grad, torch.full((elems,), float(n)))
del res, g
halves = torch.full((elems,), r + 1, dtype=torch.float16)
assert torch.equal(hvd.allreduce(halves, op=hvd.Sum),
                   torch.full((elems,), total, dtype=torch.float16))

# broadcast: the root's values in a new tensor, the input left alone.
src = torch.full((elems,), mine)
got = hvd.broadcast(src, root_rank=n - 1)
assert got.data_ptr() != src.data_ptr() and torch.equal(got, torch.full((elems,), float(n)))
assert torch.equal(src, torch.full((elems,), mine)), "broadcast modified its input"
del got, src

# Threads reducing at once, each with its own prepared description, all through the pool.
results, errors = {}, []


def reduce_in_thread(k):
    try:
        results[k] = [hvd.allreduce(torch.full((elems,), mine * (k + 1)), op=hvd.Sum,
                                    name=f"thread{k}.{i}")[::4096].clone() for i in range(3)]
    except BaseException as e:  # noqa: B036 - reported below
        errors.append(e)


threads = [threading.Thread(target=reduce_in_thread, args=(k,)) for k in range(2)]
for th in threads:
    th.start()
for th in threads:
    th.join(120)
assert not errors and not any(th.is_alive() for th in threads), errors
for k in range(2):
    for got in results[k]:
        assert torch.equal(got, torch.full_like(got, total * (k + 1))), (k, got[:4])
held, free = _outputs.pooled_count()
assert held * (elems * 4) <= _outputs.POOL_BYTES and free == held, (held, free)

hvd.shutdown()
assert _outputs.pooled_count() == (0, 0)
print(f"rank {r}: outputs checks passed", flush=True)
