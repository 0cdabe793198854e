"""Every function of hvdrun.torch's API on 1, 2 and 4 local ranks (workers/api_worker.py
makes the checks; each rank prints a line when all of them held)."""
import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [1, 2, 4])
def test_api_local(np):
    expect_ok(run_job(np, "api_worker.py"), np)
