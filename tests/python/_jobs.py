"""Running hvdrun jobs from the tests: the built launcher, python3 ranks, output
collected, and a deadline on every job (at the deadline the launcher gets SIGINT, which
stops every rank, and the test fails with what the job printed); and the loopback SSH
cluster as a fixture. tests/tensorflow uses this module too."""
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
REPO = os.path.dirname(os.path.dirname(HERE))


def use_build_tree():
    """Fills in the build tree's paths (HVDRUN_BUILD_DIR, default build/) where the tests
    run outside ctest, and puts the checkout's python/ on the path."""
    build = os.environ.get("HVDRUN_BUILD_DIR", os.path.join(REPO, "build"))
    os.environ.setdefault("HVDRUN_LIBRARY", os.path.join(build, "runtime", "libhvdrun.so"))
    os.environ.setdefault("HVDRUN_LAUNCHER", os.path.join(build, "cli", "hvdrun"))
    os.environ.setdefault("HVDRUN_TEST_CLUSTER",
                          os.path.join(build, "tests", "support", "hvdrun_test_cluster"))
    if os.path.join(REPO, "python") not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.join(REPO, "python"), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, os.path.join(REPO, "python"))


@dataclass
class Job:
    code: int
    out: str
    err: str

    def describe(self):
        return f"exit {self.code}\n--- stdout ---\n{self.out}\n--- stderr ---\n{self.err}"

    def rank_lines(self, text):
        """Ranks that printed a line containing `text` on stdout."""
        ranks = set()
        for line in self.out.splitlines():
            if line.startswith("[") and "]<stdout>:" in line and text in line:
                ranks.add(int(line[1:line.index("]")]))
        return ranks


def launcher():
    return os.environ["HVDRUN_LAUNCHER"]


def run_job(np, worker, *args, hosts=None, ssh_config=None, env=None, forward=(),
            timeout=90, launcher_args=(), python=None):
    """Runs `hvdrun -np N [-H hosts] [launcher_args] python3 workers/<worker> args` (or the
    absolute path `worker`) and returns its Job; the ranks run `python` (default: this
    interpreter)."""
    cmd = [launcher(), "-np", str(np)] + list(launcher_args)
    if hosts:
        cmd += ["-H", hosts]
    if ssh_config:
        cmd += ["--ssh-config", ssh_config]
    full_env = dict(os.environ)
    full_env.update(env or {})
    for name in ("HVDRUN_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE") + tuple(forward):
        if name in full_env:
            cmd += ["-x", name]
    cmd += [python or sys.executable, os.path.join(WORKERS, worker)] + [str(a) for a in args]
    proc = subprocess.Popen(cmd, env=full_env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"hvdrun -np {np} {worker} did not finish within {timeout} s\n"
                    f"--- stdout ---\n{out}\n--- stderr ---\n{err}")
    return Job(proc.returncode, out, err)


def expect_ok(job, np, marker="checks passed"):
    """Asserts the job exited 0 and every rank printed `marker`."""
    assert job.code == 0, job.describe()
    assert job.rank_lines(marker) == set(range(np)), job.describe()


@pytest.fixture(scope="module")
def ssh_config():
    """The ssh_config of a loopback cluster of node1 and node2."""
    yield from loopback_cluster(2)


def loopback_cluster(hosts):
    """Starts a loopback sshd cluster of node1..node`hosts`, yields its ssh_config path and
    stops it (a fixture's body)."""
    if os.geteuid() != 0:
        pytest.skip("the loopback sshd cluster needs root")
    helper = os.environ["HVDRUN_TEST_CLUSTER"]
    if not os.path.exists(helper):
        pytest.fail(f"{helper} is missing: build the hvdrun_test_cluster target")
    proc = subprocess.Popen([helper, str(hosts)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    line = ""
    while not line.endswith("\n"):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
        if not ready:
            proc.kill()
            pytest.fail("hvdrun_test_cluster printed no ssh_config within 30 s: "
                        + proc.stderr.read())
        chunk = proc.stdout.readline()
        if not chunk:
            pytest.fail("hvdrun_test_cluster failed: " + proc.stderr.read())
        line += chunk
    yield line.strip()
    proc.stdin.close()  # EOF: the helper stops sshd and removes its directory
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("hvdrun_test_cluster did not stop within 20 s of stdin EOF")
