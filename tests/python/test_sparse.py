"""Sparse tensors at np 2 and 4 (workers/sparse_worker.py): sparse_allreduce_async against
the sum computed in one process, and nn.Embedding(sparse=True) trained through
DistributedOptimizer with and without sparse_as_dense, equal on every rank and to the same
training in one process."""
import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [2, 4])
def test_sparse(np):
    expect_ok(run_job(np, "sparse_worker.py", timeout=180), np, marker="sparse checks passed")
