"""Every function of hvdrun.torch's API on 1, 2 and 4 local ranks (workers/api_worker.py
makes the checks; each rank prints a line when all of them held)."""
import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [1, 2, 4])
def test_api_local(np):
    expect_ok(run_job(np, "api_worker.py"), np)


@pytest.mark.parametrize("np", [1, 2])
def test_allreduce_prepared_and_pooled_outputs(np):
    # The common case's prepared calls (ops, dtypes, names, non-contiguous, gradients) and
    # large outputs from the pool: reused once freed, never while a view lives, from threads.
    expect_ok(run_job(np, "outputs_worker.py"), np)


def test_objects_are_unpickled_only_from_authenticated_bytes(tmp_path):
    marker = tmp_path / "planted"
    job = run_job(3, "object_auth_worker.py", marker)
    assert job.code == 0, job.describe()
    for kind in ("forged broadcast", "replayed broadcast", "forged allgather",
                 "short broadcast"):
        assert job.rank_lines(f"{kind}: refused: ") == {1, 2}, job.describe()
    assert "failed its MAC check" in job.out and "rank 0" in job.out
    assert "too short to carry its MAC" in job.out
    assert "UNPICKLED" not in job.out, job.describe()
    assert job.rank_lines("done, planted file exists: False") == {0, 1, 2}, job.describe()
    assert not marker.exists()
