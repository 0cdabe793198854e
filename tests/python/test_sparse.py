"""Sparse tensors at np 2 and 4 (workers/sparse_worker.py): sparse_allreduce_async against
the sum computed in one process, and nn.Embedding(sparse=True) trained through
DistributedOptimizer with and without sparse_as_dense, equal on every rank and to the same
training in one process; on CUDA tensors too where torch sees a CUDA device."""
import pytest
import torch

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [2, 4])
def test_sparse(np):
    expect_ok(run_job(np, "sparse_worker.py", timeout=180), np, marker="sparse checks passed")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_sparse_cuda():
    job = run_job(2, "sparse_worker.py", "cuda", env={"HVDRUN_NCCL": "require"},
                  forward=("HVDRUN_NCCL",), timeout=180)
    expect_ok(job, 2, marker="sparse checks passed")
