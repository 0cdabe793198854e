"""hvdrun.torch on CUDA tensors through NCCL (workers/gpu_worker.py) at np 1 and 2.
Skipped where torch sees no CUDA device; run on a GPU machine with ctest -L gpu."""
import pytest
import torch

from _jobs import expect_ok, run_job

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="torch sees no CUDA device")


@pytest.mark.parametrize("np", [1, 2])
def test_gpu_collectives_and_optimizer(np):
    job = run_job(np, "gpu_worker.py",
                  env={"HVDRUN_NCCL": "require", "HOROVOD_DYNAMIC_PROCESS_SETS": "1"},
                  forward=("HVDRUN_NCCL", "HOROVOD_DYNAMIC_PROCESS_SETS"), timeout=180)
    expect_ok(job, np)
