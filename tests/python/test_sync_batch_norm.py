"""hvd.SyncBatchNorm at np 2 and 4 (workers/sync_bn_worker.py makes the checks against
torch's BatchNorm on the whole batch in one process; the ranks' batch sizes differ, and at
np 4 one rank has no rows); on CUDA tensors too where torch sees a CUDA device."""
import pytest
import torch

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [2, 4])
def test_sync_batch_norm(np):
    expect_ok(run_job(np, "sync_bn_worker.py", timeout=180), np,
              marker="sync batch norm checks passed")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_sync_batch_norm_cuda():
    job = run_job(2, "sync_bn_worker.py", "cuda", env={"HVDRUN_NCCL": "require"},
                  forward=("HVDRUN_NCCL",), timeout=180)
    expect_ok(job, 2, marker="sync batch norm checks passed")
