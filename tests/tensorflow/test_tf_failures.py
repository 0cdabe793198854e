"""Failures with TensorFlow: a rank that raises during model.fit ends the job, the
launcher naming it and quoting its traceback; Horovod names hvdrun does not provide say
what to use instead; a broken compiler fails the op library's build with the command
and what to do; a library another user planted in the op library's cache is never loaded.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

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


PLANTED = textwrap.dedent("""\
    #include <fcntl.h>
    #include <unistd.h>
    __attribute__((constructor)) static void planted(void) {
      int fd = open(MARKER, O_WRONLY | O_CREAT, 0644);
      if (fd >= 0) close(fd);
    }
    """)


def test_op_library_planted_by_another_user_is_not_loaded_by_init():
    """nobody makes the cache directory in a shared 1777 place before the user does, and
    puts a library where this TensorFlow's key (public inputs) says hvdrun looks."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to act as another local user (nobody)")
    from hvdrun import _tf_build
    base = tempfile.mkdtemp(prefix="hvdrun-tf-planted-")
    try:
        os.chmod(base, 0o755)
        scratch, marker = os.path.join(base, "scratch"), os.path.join(base, "planted-ran")
        os.mkdir(scratch)
        os.chmod(scratch, 0o1777)
        with open(os.path.join(base, "planted.c"), "w") as f:
            f.write(PLANTED)
        subprocess.run(["cc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o",
                        os.path.join(base, "planted.so"), os.path.join(base, "planted.c")],
                       check=True)
        cache, key = os.path.join(scratch, "tf-ops"), _tf_build.key_name()[0]
        planting = (f"mkdir -m 1777 {cache} && mkdir {cache}/{key} && "
                    f"cp {base}/planted.so {cache}/{key}/{_tf_build.LIBRARY_NAME}")
        r = subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", planting], cwd="/",
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        env = dict(os.environ, HVDRUN_TF_OPS_CACHE=cache)
        env.pop("HVDRUN_TF_OPS", None)
        p = subprocess.run([sys.executable, "-c", "import hvdrun.tensorflow as hvd; hvd.init()"],
                           env=env, capture_output=True, text=True, timeout=120)
        assert not os.path.exists(marker), "the planted library was loaded"
        assert p.returncode == 1, p.stderr
        assert (f"hvdrun._tf_build.BuildError: hvdrun.tensorflow: the op library's cache "
                f"'{cache}' belongs to another user, nobody (uid 65534), who could replace "
                "what is in it; set HVDRUN_TF_OPS_CACHE to a directory of your own (hvdrun "
                "creates a missing one with mode 0700)") in p.stderr, p.stderr
    finally:
        shutil.rmtree(base)
