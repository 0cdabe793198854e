"""DistributedOptimizer on 1, 2 and 4 local ranks (workers/optimizer_worker.py): exact
averaged gradients, parameters bit-identical across ranks over many steps while the
ranks' hooks fire in different orders, fp16 compression, backward_passes_per_step,
op=Sum, gradient_predivide_factor, skip_synchronize and the zero_grad check. The
fusion threshold varies: one gradient per collective, small buckets, the default."""
import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np,threshold", [(1, None), (2, None), (2, "0"), (4, "4096")])
def test_optimizer(np, threshold):
    env = {} if threshold is None else {"HOROVOD_FUSION_THRESHOLD": threshold}
    job = run_job(np, "optimizer_worker.py", 60, env=env)
    expect_ok(job, np)
