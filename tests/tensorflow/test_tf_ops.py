"""Every hvdrun.tensorflow collective against values computed with NumPy, eagerly and in
tf.function, with gradients, DistributedGradientTape, names matched in any order, a
mismatch named and survived, join, and init after shutdown (workers/ops_worker.py), then
alltoall, reducescatter, process sets and many collectives in flight in rank-dependent
orders (workers/scatter_checks.py), on 1 and 4 local ranks (the reductions run at np 3
too, in test_tf_semantics.py). The ranks import TensorFlow before libhvdrun loads."""
import pytest

from _jobs import expect_ok
from _tf_jobs import run_tf_job


@pytest.mark.parametrize("np", [1, 4])
def test_ops(np):
    job = run_tf_job(np, "ops_worker.py", env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"})
    expect_ok(job, np, marker="tf ops checks passed")
