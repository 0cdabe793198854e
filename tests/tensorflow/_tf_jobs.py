"""The TensorFlow tests' jobs: tests/python's run_job with this folder's workers, the
variables every rank needs forwarded, and a deadline that covers importing TensorFlow in
four ranks on a loaded machine. And a job left running while a test acts on it (kills a
host's agent, lets it come back), its workers writing one record file per process."""
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from _jobs import launcher, run_job

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
FORWARD = ("TF_CPP_MIN_LOG_LEVEL", "HVDRUN_TF_OPS_CACHE", "HVDRUN_TF_OPS",
           "HOROVOD_DYNAMIC_PROCESS_SETS")


def run_tf_job(np, worker, *args, timeout=240, **kw):
    """Runs workers/<worker> in a job of `np` ranks with this interpreter."""
    return run_job(np, os.path.join(WORKERS, worker), *args, timeout=timeout,
                   forward=FORWARD, **kw)


def start_tf_job(np, worker, out_dir, launcher_args, args=(), ssh_config=None, env=None):
    """Starts `hvdrun -np N launcher_args python workers/<worker> out_dir args` and returns
    the Popen; the worker writes its records under out_dir (see records()). `env` is set
    for the launcher and forwarded to the ranks."""
    forward = ("HVDRUN_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE") + FORWARD \
        + tuple(env or {})
    env = dict(os.environ, **(env or {}))
    cmd = [launcher(), "-np", str(np)] + list(launcher_args)
    if ssh_config:
        cmd += ["--ssh-config", ssh_config]
    for name in forward:
        if name in env:
            cmd += ["-x", name]
    cmd += [sys.executable, os.path.join(WORKERS, worker), str(out_dir)] + list(args)
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def records(out_dir):
    """{pid: [(kind, pid, agent, generation, rank, size, steps, extra...)]} of every process
    that wrote out_dir/pid-<pid> (whole lines only)."""
    found = {}
    for name in os.listdir(out_dir):
        if name.startswith("pid-"):
            with open(os.path.join(out_dir, name)) as f:
                lines = [line.split() for line in f.read().split("\n")[:-1]]
            found[int(name[4:])] = [(w[0],) + tuple(int(v) for v in w[1:]) for w in lines]
    return found


def first(recs, kind, generation=None):
    """The first record of `kind` (in `generation`) of one process, or None."""
    return next((r for r in recs if r[0] == kind and generation in (None, r[3])), None)


def wait_for(what, test, proc, deadline_s):
    """Waits until test() returns something true (checked every 50 ms) and returns it;
    fails with `what` and the job's output when the deadline passes (the job is stopped)
    or the job ends first."""
    deadline = time.monotonic() + deadline_s
    while True:
        got = test()
        if got:
            return got
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"hvdrun ended (exit {proc.returncode}) before {what}\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"no {what} within {deadline_s} s\n{out}\n{err}")
        select.select([], [], [], 0.05)


def finish(proc, out_dir, deadline_s=120):
    """Asks the ranks to stop at their next commit (the file out_dir/stop) and returns
    (exit code, stdout, stderr)."""
    open(os.path.join(out_dir, "stop"), "w").close()
    try:
        out, err = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"hvdrun did not end within {deadline_s} s of the stop file\n{out}\n{err}")
    return proc.returncode, out, err


def alive(pid):
    """Whether process `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
