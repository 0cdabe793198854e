"""The stack report (docs/diagnosis.md#the-stack-report) with real Python ranks: a hung job of
4 ranks (ranks 0 and 3 in an allreduce, rank 1 in time.sleep, rank 2 in queue.get). SIGQUIT to
hvdrun, or `hvdrun stacks PID` from another terminal, prints where every rank is and the job
goes on; --timeout prints it again, then tears the job down (exit 124) within its time + 5 s
with nothing left running. Over the loopback SSH cluster too, where the agents are remote."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from _jobs import WORKERS, launcher, run_job, ssh_config  # noqa: F401 (a fixture)

TIMEOUT = 20  # the job's --timeout: 4 ranks importing torch on a loaded machine take ~10 s
WORKER = os.path.join(WORKERS, "stuck_worker.py")
# Where each rank blocks: stuck_worker.py's lines.
ALLREDUCE_LINE = "stuck_worker.py:13 in wait_in_allreduce -> allreduce 'grad' float32[4] waiting"
SLEEP_LINE = "stuck_worker.py:20 in main, no collective"
QUEUE_LINE = "stuck_worker.py:22 in main, no collective"


class Running:
    """hvdrun with its stderr read as it comes, so a test can wait for a line."""

    def __init__(self, cmd, env):
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err = ""
        self.out = ""
        self.lock = threading.Lock()
        self.readers = [threading.Thread(target=self._read, args=(s,), daemon=True)
                        for s in ("out", "err")]
        for t in self.readers:
            t.start()

    def _read(self, which):
        stream = getattr(self.proc, "std" + which)
        for line in stream:
            with self.lock:
                setattr(self, which, getattr(self, which) + line)

    def wait_for(self, what, test, within):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            with self.lock:
                if test(self):
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"{what} did not happen within {within} s\n{self.describe()}")

    def finish(self, within):
        try:
            self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"hvdrun did not end within {within} s\n{self.describe()}")
        for t in self.readers:
            t.join(10)
        return self.proc.returncode

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def describe(self):
        return f"--- stdout ---\n{self.out}\n--- stderr ---\n{self.err}"


def with_marker(marker, ranks_only=False):
    """Live processes whose environment holds `marker` (NAME=value); with `ranks_only`, those
    that are ranks (HVDRUN_RANK set: not hvdrun, not an agent)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() not in env or state == "Z":
            continue
        if ranks_only and not any(e.startswith(b"HVDRUN_RANK=") for e in env):
            continue
        pids.append(int(d))
    return pids


def report(text, n):
    """The n-th (0-based) stack report in hvdrun's stderr: its rank lines."""
    parts = text.split("hvdrun: where the ranks are (")
    assert len(parts) > n + 1, text
    return [line for line in parts[n + 1].splitlines() if line.startswith("rank")]


def named(text, n):
    """The ranks the n-th report's rank lines name so far."""
    if text.count("hvdrun: where the ranks are (") <= n:
        return set()
    ranks = set()
    for line in report(text, n):
        for part in line.split(":", 1)[0].split(" ", 1)[1].split(", "):
            first, _, last = part.partition("-")
            ranks.update(range(int(first), int(last or first) + 1))
    return ranks


def expected(lines):
    """Ranks 0 and 3 grouped in the allreduce; ranks 1 and 2 at their blocked frames."""
    return (len(lines) == 3 and lines[0].startswith("ranks 0, 3: " + ALLREDUCE_LINE)
            and lines[1] == "rank 1: " + SLEEP_LINE and lines[2] == "rank 2: " + QUEUE_LINE)


def check_report(lines, err):
    assert expected(lines), "\n".join(lines) + "\n" + err


def ask_from_another_terminal(job, earlier):
    """`hvdrun stacks PID` gets the same report (and hvdrun prints it too); another user
    cannot reach the job's socket, in a directory only its owner may enter."""
    p = subprocess.run([launcher(), "stacks", str(job.proc.pid)], capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("hvdrun: where the ranks are (hvdrun stacks; the job goes on):")
    check_report(report(p.stdout, 0), p.stdout)
    job.wait_for("the report on hvdrun's stderr too",
                 lambda j: named(j.err, earlier) == {0, 1, 2, 3}, 10)
    if os.geteuid() != 0:
        return
    path = f"/tmp/hvdrun-0/job-{job.proc.pid}.sock"
    if os.environ.get("XDG_RUNTIME_DIR", "").startswith("/"):
        path = f"{os.environ['XDG_RUNTIME_DIR']}/hvdrun/job-{job.proc.pid}.sock"
    other = subprocess.run(
        ["runuser", "-u", "nobody", "--", sys.executable, "-c",
         "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
         "try:\n s.connect(sys.argv[1]); print(s.recv(200).decode())\n"
         "except OSError as e: print(type(e).__name__)", path],
        capture_output=True, text=True, timeout=20)
    assert other.stdout.strip() in ("PermissionError", "FileNotFoundError") or \
        "refused" in other.stdout, other.stdout + other.stderr


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_stack_report_on_sigquit_and_timeout(where, request):
    marker = f"HVDRUN_TEST_MARKER={uuid.uuid4().hex}"
    env = dict(os.environ)
    env["HVDRUN_TEST_MARKER"] = marker.split("=", 1)[1]
    cmd = [launcher(), "-np", "4", "--timeout", str(TIMEOUT), "-x", "HVDRUN_TEST_MARKER"]
    if where == "ssh":
        cmd += ["-H", "node1:2,node2:2", "--ssh-config", request.getfixturevalue("ssh_config")]
    for name in ("HVDRUN_LIBRARY", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"):
        if name in env:
            cmd += ["-x", name]
    cmd += [sys.executable, WORKER]
    started = time.monotonic()
    job = Running(cmd, env)
    job.wait_for("4 ranks ready", lambda j: j.out.count("<stdout>:ready") == 4, TIMEOUT - 4)
    # The ranks run in process groups of their own: a terminal's Ctrl-\ reaches hvdrun alone.
    ranks = with_marker(marker, ranks_only=True)
    assert len(ranks) == 4, ranks
    assert all(os.getpgid(p) != os.getpgid(job.proc.pid) for p in ranks)
    # "ready" comes just before each rank blocks: a report that still finds one on its way
    # is asked for again.
    for asked in range(1, 6):
        job.proc.send_signal(signal.SIGQUIT)
        job.wait_for("the SIGQUIT report", lambda j, n=asked: named(j.err, n - 1) == {0, 1, 2, 3},
                     10)
        if expected(report(job.err, asked - 1)):
            break
    check_report(report(job.err, asked - 1), job.describe())
    if where == "local":
        ask_from_another_terminal(job, asked)
        asked += 1
    # The job goes on: every rank still runs.
    assert job.proc.poll() is None, job.describe()
    assert all(os.path.exists(f"/proc/{p}") for p in ranks)
    code = job.finish(TIMEOUT + 20)
    took = time.monotonic() - started
    assert code == 124, job.describe()
    assert took < TIMEOUT + 5 + 1, job.describe()  # + the launcher's own start
    assert f"hvdrun: where the ranks are (--timeout {TIMEOUT} s):" in job.err, job.describe()
    check_report(report(job.err, asked), job.describe())
    # The waited time grows between the reports.
    waits = [float(m) for m in re.findall(r"float32\[4\] waiting ([0-9.]+) s", job.err)]
    assert len(waits) >= 2 and waits[-1] > waits[-2], job.describe()
    # The blocked frames' stacks are printed once per group.
    last = job.err.split("hvdrun: where the ranks are (--timeout")[1]
    assert last.count('stuck_worker.py", line 13 in wait_in_allreduce') == 1, job.describe()
    assert last.count('stuck_worker.py", line 20 in main') == 1, job.describe()
    assert "ran past --timeout" in job.err.splitlines()[-1], job.describe()
    deadline = time.monotonic() + 5
    while with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert with_marker(marker) == [], "processes left running"


def test_a_rank_that_ends_leaves_no_unclosed_stack_file():
    """The stack report's file stays open for the life of each rank; a rank that ends
    normally under Python's development mode (every warning shown) reports nothing unclosed
    (a file object left to the interpreter's exit did: a ResourceWarning on every rank)."""
    job = run_job(2, "homogeneous_worker.py", env={"PYTHONDEVMODE": "1"},
                  forward=("PYTHONDEVMODE",))
    assert job.code == 0, job.describe()
    assert "rank 1: homogeneous=" in job.out, job.describe()
    assert "ResourceWarning" not in job.err and "unclosed" not in job.err, job.describe()
