"""Failures with TensorFlow: a rank that raises during model.fit ends the job, the
launcher naming it and quoting its traceback; Horovod names hvdrun does not provide say
what to use instead; a broken compiler fails the op library's build with the command
and what to do."""
import os
import subprocess
import sys

import pytest

from _tf_jobs import run_tf_job


def test_rank_raising_in_fit_ends_the_job():
    job = run_tf_job(2, "failing_worker.py")
    assert job.code == 1, job.describe()
    assert "trained all epochs" not in job.out, job.describe()
    launcher = job.err[job.err.index("rank 1 on host localhost exited with code 1"):]
    assert "RuntimeError: deliberate failure on rank 1 in a Keras callback" in launcher, \
        job.describe()
    assert "[1]<stderr>:Traceback (most recent call last)" in job.err, job.describe()


@pytest.mark.parametrize("module,name", [
    ("hvdrun.tensorflow", "Adasum"), ("hvdrun.tensorflow", "start_timeline"),
    ("hvdrun.tensorflow", "BroadcastGlobalVariablesHook"),
    ("hvdrun.tensorflow", "broadcast_object_fn"),
    ("hvdrun.tensorflow.keras", "start_timeline"), ("hvdrun.keras", "stop_timeline")])
def test_unsupported_api_names_itself(module, name):
    import importlib
    hvd = importlib.import_module(module)
    with pytest.raises(NotImplementedError) as e:
        getattr(hvd, name)
    assert f"{module}.{name}" in str(e.value) and "instead" in str(e.value)
    assert not hasattr(hvd, name)


def test_op_library_build_failure_says_what_failed(tmp_path):
    env = dict(os.environ, CXX="/nonexistent/c++", HVDRUN_TF_OPS_CACHE=str(tmp_path))
    env.pop("HVDRUN_TF_OPS", None)
    p = subprocess.run([sys.executable, "-m", "hvdrun._tf_build"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    assert "cannot run the C++ compiler '/nonexistent/c++'" in p.stderr, p.stderr
    assert "install g++ (or set CXX)" in p.stderr, p.stderr
