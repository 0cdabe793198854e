"""Every function of hvdrun.torch's API on 1, 2 and 4 local ranks (workers/api_worker.py
makes the checks; each rank prints a line when all of them held), and is_homogeneous() on
hosts of equal and unequal numbers of ranks."""
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


@pytest.mark.parametrize("np,hosts,even", [
    # Ranks 1 and 3 have size == local_size * cross_size (6 == 3 * 2, 6 == 2 * 3), the test
    # each rank used to answer alone; the world is uneven all the same.
    (6, "localhost:3,127.0.0.1:2,localhost.localdomain:1", False),
    (3, "localhost:2,127.0.0.1:1", False),
    (4, "localhost:2,127.0.0.1:2", True),
])
def test_is_homogeneous_is_the_same_answer_on_every_rank(np, hosts, even):
    job = run_job(np, "homogeneous_worker.py", hosts=hosts)
    assert job.code == 0, job.describe()
    assert job.rank_lines(f"homogeneous={even}") == set(range(np)), job.describe()
    assert job.rank_lines(f"homogeneous={not even}") == set(), job.describe()
