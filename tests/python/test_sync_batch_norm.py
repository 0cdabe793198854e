"""hvd.SyncBatchNorm at np 2 and 4 (workers/sync_bn_worker.py makes the checks against
torch's BatchNorm on the whole batch in one process; the ranks' batch sizes differ, and at
np 4 one rank has no rows)."""
import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [2, 4])
def test_sync_batch_norm(np):
    expect_ok(run_job(np, "sync_bn_worker.py", timeout=180), np,
              marker="sync batch norm checks passed")
