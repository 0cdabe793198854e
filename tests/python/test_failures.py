"""Failures: a rank that raises after init ends the job, with its traceback in the
launcher's message, within a deadline (no background thread keeps a process alive);
ranks that leave with work pending or without shutdown() still exit 0; unsupported
Horovod API and a missing or wrong library fail with messages that name them."""
import json
import os
import subprocess
import sys
import time

import pytest

from _jobs import expect_ok, launcher, run_job

# A job that has not ended by this has hung. Starting ranks (importing torch from a cold
# page cache, beside other tests) can take much of it, so the teardown is timed on its own.
DEADLINE = 120
# From the failing rank's failure to the launcher's exit: every rank stopped and reaped.
TEARDOWN = 15


def failed_at(job):
    """When the failing rank said it fails (time.monotonic() of that process)."""
    for line in job.err.splitlines():
        if "<stderr>:failing at " in line:
            return float(line.rsplit(" ", 1)[1])
    pytest.fail("the failing rank did not say when it failed\n" + job.describe())


@pytest.mark.parametrize("mode,text", [
    ("raise-in-collective", "RuntimeError: deliberate failure on rank 1 after init"),
    ("raise-in-backward", "backward_passes_per_step"),
])
@pytest.mark.parametrize("np", [2, 4])
def test_rank_raising_after_init_ends_the_job(np, mode, text):
    job = run_job(np, "failing_worker.py", mode, timeout=DEADLINE)
    ended = time.monotonic()
    assert job.code == 1, job.describe()
    assert ended - failed_at(job) < TEARDOWN, job.describe()
    assert "rank 1 on host localhost exited with code 1" in job.err, job.describe()
    # The launcher's own message quotes the end of rank 1's traceback.
    launcher_lines = job.err[job.err.index("rank 1 on host localhost"):]
    assert text in launcher_lines, job.describe()
    assert "[1]<stderr>:Traceback (most recent call last)" in job.err, job.describe()


@pytest.mark.parametrize("mode", ["pending-at-exit", "no-shutdown"])
def test_untidy_exit_still_succeeds(mode):
    job = run_job(2, "failing_worker.py", mode, timeout=DEADLINE)
    expect_ok(job, 2, marker="leaving")


def python(code, **env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=60)


def test_hvdrun_imports_without_torch_or_library():
    p = python("import sys; sys.modules['torch'] = None\n"
               "import hvdrun; print(hvdrun.__version__, hvdrun.run.__name__)",
               HVDRUN_LIBRARY="/nonexistent/libhvdrun.so")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0.1.0", "run"]


def test_missing_library_says_how_to_fix():
    p = python("import hvdrun.torch as hvd; hvd.init()", HVDRUN_LIBRARY="/nonexistent/libhvdrun.so")
    assert p.returncode != 0
    assert "libhvdrun.so not found at /nonexistent/libhvdrun.so (from HVDRUN_LIBRARY)" in p.stderr
    assert "pip install" in p.stderr


def test_library_of_an_older_abi_is_refused():
    from hvdrun._lib import ABI_REQUIRED
    p = python("import hvdrun.torch as hvd; hvd.init()", HVDRUN_LIBRARY="libm.so.6")
    assert p.returncode != 0
    assert f"ABI version 1, this package needs version {ABI_REQUIRED} or later" in p.stderr, p.stderr


def test_init_with_a_broken_job_environment_fails_with_the_library_message():
    env = dict(os.environ, HVDRUN_RANK="0")  # only part of a rank's variables
    env.pop("HVDRUN_SIZE", None)
    p = subprocess.run([sys.executable, "-c", "import hvdrun.torch as hvd; hvd.init()"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "HvdrunError: hvdrun.torch.init failed: " in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["Adasum", "DistributedAdasumOptimizer"])
def test_unsupported_api_names_itself(name):
    import hvdrun.torch as hvd
    with pytest.raises(NotImplementedError) as e:
        getattr(hvd, name)
    assert f"hvdrun.torch.{name}" in str(e.value) and "instead" in str(e.value)
    assert not hasattr(hvd, name)


def test_unsupported_arguments_name_themselves():
    import torch

    import hvdrun.torch as hvd
    with pytest.raises(TypeError, match="process_set must be a ProcessSet"):
        hvd.allreduce(torch.ones(1), process_set=object())
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0]))


SCHEMA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "docs", "result-file.schema.json")


def check_result_file(path):
    """The --result-file at `path`, checked against docs/result-file.schema.json."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    with open(SCHEMA, encoding="utf-8") as f:
        schema = json.load(f)
    try:
        import jsonschema
    except ImportError:  # the required keys by hand
        for key in schema["required"]:
            assert key in data, key
        for rank in data["ranks"]:
            for key in schema["$defs"]["rank"]["required"]:
                assert key in rank, key
        return data
    jsonschema.Draft202012Validator(schema).validate(data)
    return data


@pytest.mark.parametrize("mode", ["plain", "record"])
def test_error_file_traceback_is_quoted_once(mode, tmp_path):
    result = tmp_path / "result.json"
    job = run_job(2, "raising_worker.py", mode, timeout=DEADLINE,
                  launcher_args=["--result-file", str(result)])
    assert job.code == 1, job.describe()
    verdict = job.err[job.err.index("hvdrun: rank 1 on host localhost exited with code 1"):]
    assert "its traceback (from its error file, TORCHELASTIC_ERROR_FILE):" in verdict, \
        job.describe()
    assert verdict.count("ValueError: deliberate failure from rank 1") == 1, job.describe()
    assert 'raise ValueError("deliberate failure from rank 1")' in verdict, job.describe()
    assert "wrote to stderr" not in verdict, job.describe()
    data = check_result_file(result)
    assert (data["exit_code"], data["cause"], data["size"]) == (1, "rank-failed", 2)
    failed, stopped = data["ranks"][1], data["ranks"][0]
    assert (failed["exit_code"], failed["signal"], failed["cause"]) == (1, None, "failed")
    assert "ValueError: deliberate failure from rank 1" in failed["traceback"]
    assert (stopped["cause"], stopped["traceback"]) == ("stopped", None), data
    assert failed["start_time"] <= failed["end_time"] <= data["end_time"]


def test_a_launch_that_ends_before_any_rank_still_leaves_a_result_file(tmp_path):
    """A host that cannot be started (exec: through a command that does not exist): the
    file an earlier run left is replaced by this run's verdict, with no ranks."""
    result = tmp_path / "result.json"
    result.write_text('{"left": "by an earlier run"}\n')
    proc = subprocess.run([launcher(), "--launcher", "exec:/nonexistent/docker exec -i {host}",
                           "-H", "c1", "--result-file", str(result), "true"],
                          capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert proc.returncode == 255, proc.stderr
    data = check_result_file(result)
    assert (data["exit_code"], data["cause"], data["size"], data["ranks"]) == \
        (255, "launch-failed", 0, []), data
    assert "could not be reached; nothing was started" in data["message"], data
    assert "/nonexistent/docker" in data["message"], data
    assert data["start_time"] <= data["end_time"]
    # Bad input found once the command line was read (more ranks than cores to bind them
    # to): exit 2, said as such.
    np = len(os.sched_getaffinity(0)) + 1
    proc = subprocess.run([launcher(), "-np", str(np), "-H", f"localhost:{np}", "--bind-to",
                           "core", "--result-file", str(result), "true"],
                          capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert proc.returncode == 2, proc.stderr
    data = check_result_file(result)
    assert (data["exit_code"], data["cause"], data["ranks"]) == (2, "usage", []), data
    assert data["message"].startswith("hvdrun: error: host localhost: "), data
