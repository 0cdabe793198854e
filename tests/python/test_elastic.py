"""hvdrun's elastic mode seen from hvdrun.torch: a rank that fails restarts the job in
generation 1, where hvd.generation() says so and the program resumes from its
checkpoint."""
from _jobs import run_job


def test_a_failed_generation_resumes_from_its_checkpoint(tmp_path):
    job = run_job(2, "elastic_worker.py", tmp_path / "ckpt.pt",
                  launcher_args=["--max-restarts", "1"])
    assert job.code == 0, job.describe()
    assert job.rank_lines("generation 1 resumed at step 42") == {0, 1}, job.describe()
    assert "rank 1 on host localhost exited with code 3" in job.err, job.describe()
    assert "elastic: generation 1 starts with 2 ranks" in job.err, job.describe()
