"""Training as Horovod's TensorFlow 2 examples do it, with only the import line changed:
a Keras 3 model.fit with DistributedOptimizer and the callbacks (workers/keras_worker.py)
and a custom tf.function loop with DistributedGradientTape and broadcast_variables
(workers/tape_worker.py). Each checks that the loss fell and every rank ends with the same
weights; model.fit locally at np 4 and across two loopback SSH hosts at np 2, the loop
locally at np 2 and across two hosts at np 4 (each size once per worker, to keep CI short).
The tape over a process set that rank 2 is outside of (workers/tape_set_worker.py). And
SyncBatchNormalization against BatchNormalization on the whole batch
(workers/sync_bn_worker.py) at np 2 and 4. The distributed optimizer's `lr`, Keras 2's name
for the learning rate, which Horovod's examples use."""
import pytest

from _jobs import expect_ok, ssh_config  # noqa: F401 (a fixture)
from _tf_jobs import run_tf_job


@pytest.mark.parametrize("np", [4])
def test_keras_fit(np, tmp_path):
    expect_ok(run_tf_job(np, "keras_worker.py", 3, tmp_path), np, marker="keras checks passed")


@pytest.mark.parametrize("np", [2])
def test_gradient_tape_loop(np):
    expect_ok(run_tf_job(np, "tape_worker.py", 60), np, marker="tape checks passed")


def test_gradient_tape_over_a_process_set():
    """Rank 2 is outside the set: it keeps its own gradients, as in Horovod."""
    job = run_tf_job(3, "tape_set_worker.py", env={"HOROVOD_DYNAMIC_PROCESS_SETS": "1"})
    expect_ok(job, 3, marker="tape set checks passed")


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


def test_distributed_optimizer_lr_reads_and_sets_the_learning_rate():
    import keras

    import hvdrun.tensorflow.keras as hvd
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5, momentum=0.9))
    assert float(opt.lr) == 0.5
    opt.lr = 0.25
    assert float(opt.learning_rate) == 0.25
    opt.lr.assign(0.125)  # as Horovod's TF2 elastic example rescales it on a reset
    assert float(opt.learning_rate) == 0.125
    assert "lr" not in opt.get_config() and opt.get_config()["learning_rate"] == 0.125
    assert not hasattr(keras.optimizers.SGD(0.5), "lr")  # Keras' own classes untouched
