"""Training as Horovod's TensorFlow 2 examples do it, with only the import line changed:
a Keras 3 model.fit with DistributedOptimizer and the callbacks (workers/keras_worker.py)
and a custom tf.function loop with DistributedGradientTape and broadcast_variables
(workers/tape_worker.py). Each checks that the loss fell and every rank ends with the same
weights; locally at np 2 and 4, and across two loopback SSH hosts. And
SyncBatchNormalization against BatchNormalization on the whole batch
(workers/sync_bn_worker.py) at np 2 and 4."""
import pytest

from _jobs import expect_ok, ssh_config  # noqa: F401 (a fixture)
from _tf_jobs import run_tf_job


@pytest.mark.parametrize("np", [2, 4])
def test_keras_fit(np, tmp_path):
    expect_ok(run_tf_job(np, "keras_worker.py", 3, tmp_path), np, marker="keras checks passed")


@pytest.mark.parametrize("np", [2, 4])
def test_gradient_tape_loop(np):
    expect_ok(run_tf_job(np, "tape_worker.py", 60), np, marker="tape checks passed")


@pytest.mark.parametrize("np", [2, 4])
def test_sync_batch_normalization(np):
    expect_ok(run_tf_job(np, "sync_bn_worker.py"), np,
              marker="sync batch normalization checks passed")


def test_keras_fit_over_ssh(ssh_config, tmp_path):
    job = run_tf_job(2, "keras_worker.py", 3, tmp_path, hosts="node1:1,node2:1",
                     ssh_config=ssh_config)
    expect_ok(job, 2, marker="keras checks passed")


def test_gradient_tape_loop_over_ssh(ssh_config):
    job = run_tf_job(4, "tape_worker.py", 60, hosts="node1:2,node2:2", ssh_config=ssh_config)
    expect_ok(job, 4, marker="tape checks passed")
