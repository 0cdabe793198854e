"""Collectives that agree before they move (workers/negotiation_worker.py): every
mismatch raises on every rank naming both sides and the job goes on; names in any order;
join with uneven batches; init/shutdown ten times; stall reports. At np 2 and 4 on one
host; the mismatch and join cases also across loopback SSH hosts (test_ssh.py's cluster)."""
import pytest

from _jobs import expect_ok, run_job


@pytest.mark.parametrize("np", [2, 4])
@pytest.mark.parametrize("mode", ["mismatch", "names", "join", "reinit"])
def test_negotiation(mode, np):
    job = run_job(np, "negotiation_worker.py", mode, timeout=120)
    expect_ok(job, np)
    if mode == "mismatch":
        # The same words on every rank.
        assert len(job.rank_lines("allreduce 'grad.fc1': rank 0 has float32[10], rank 1 has "
                                  "float32[3]")) == np, job.describe()


def test_stall_is_reported_and_the_job_goes_on():
    job = run_job(2, "negotiation_worker.py", "stall", timeout=60,
                  env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "2"},
                  forward=("HOROVOD_STALL_CHECK_TIME_SECONDS",))
    expect_ok(job, 2)
    stalls = [line for line in job.err.splitlines() if "stall:" in line]
    assert stalls, job.describe()
    assert all(line.startswith("[0]<stderr>:") for line in stalls), job.describe()
    assert len(stalls) == 1, job.describe()  # reported once per stall
    assert "allreduce 'waiting.for.rank1'" in stalls[0], job.describe()
    assert "ranks that have submitted nothing: 1" in stalls[0], job.describe()


def test_stall_shutdown_ends_the_job_with_the_message():
    job = run_job(2, "negotiation_worker.py", "stall", timeout=60,
                  env={"HOROVOD_STALL_CHECK_TIME_SECONDS": "1",
                       "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "2"},
                  forward=("HOROVOD_STALL_CHECK_TIME_SECONDS",
                           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"))
    assert job.code == 70, job.describe()
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=2" in job.err, job.describe()
    assert "ranks that have submitted nothing: 1" in job.err, job.describe()
