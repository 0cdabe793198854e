"""Running hvdrun jobs from the tests: the built launcher, python3 ranks, output
collected, and a deadline on every job (at the deadline the launcher gets SIGINT, which
stops every rank, and the test fails with what the job printed)."""
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")


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
            timeout=90, launcher_args=()):
    """Runs `hvdrun -np N [-H hosts] [launcher_args] python3 workers/<worker> args` and
    returns its Job."""
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
    cmd += [sys.executable, os.path.join(WORKERS, worker)] + [str(a) for a in args]
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
