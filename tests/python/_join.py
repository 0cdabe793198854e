"""Join-mode jobs from the Python tests (docs/kubernetes.md): one independent `hvdrun
--nnodes N --node-rank I --rdzv-endpoint 127.0.0.2:PORT` process per "node", started in
random order with random delays, each node's output in files; processes found by a marker
in their environment, so a test can assert that nothing of a job is left running."""
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid

from _jobs import launcher

SECRET = "a-secret-of-thirty-two-characters"


def free_port():
    """A port free on every address a moment ago (node 0 may bind 0.0.0.0)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def processes_with(marker):
    """Pids of the live processes whose environment holds `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if marker.encode() + b"\0" in env and not _zombie(int(name)):
            found.append(int(name))
    return found


def wait_until(what, predicate, timeout):
    """Polls `predicate` every 20 ms until it is true; fails naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.02)


class JoinJob:
    """One job of `nnodes` hvdrun processes of `per_node` ranks each, node 0 listening on
    127.0.0.2; `command` is what every node runs (after hvdrun's own flags)."""

    def __init__(self, tmp_path, nnodes, per_node, command, flags=(), timeout=30,
                 node_range=None, env=None, node_env=None):
        """`node_range` (MIN, MAX) gives --nnodes MIN:MAX (elastic join) for `nnodes`
        nodes; `env` is added to every node's environment, then `node_env[r]` (a dict) to
        node rank r's."""
        self.dir = tmp_path
        self.nnodes = nnodes
        self.env = dict(env or {})
        self.node_env = dict(node_env or {})
        self.port = free_port()
        self.marker = f"HVDRUN_TEST_MARKER={os.getpid()}-{uuid.uuid4().hex}"
        secret = tmp_path / "secret"
        secret.write_text(SECRET + "\n")
        count = f"{node_range[0]}:{node_range[1]}" if node_range else str(nnodes)
        self.args = ["--nnodes", count, "--nproc-per-node", str(per_node),
                     "--rdzv-endpoint", f"127.0.0.2:{self.port}", "--rdzv-id", "pyjob",
                     "--rdzv-timeout", str(timeout), "--secret-file", str(secret),
                     *flags, *command]
        self.procs = {}

    def start(self, max_delay=0.7):
        """Starts the nodes in random order, each after a random delay of up to
        `max_delay` s."""
        order = list(range(self.nnodes))
        random.shuffle(order)
        for r in order:
            for kind in ("out", "err"):
                (self.dir / f"node{r}.{kind}").write_text("")
        for r in order:
            time.sleep(random.uniform(0, max_delay))
            self.start_node(r)
        return self

    def start_node(self, r):
        """Starts node rank `r` (again: a pod recreated), its output appended to its
        files."""
        env = dict(os.environ, **self.env)
        env.update(self.node_env.get(r, {}))
        name, value = self.marker.split("=", 1)
        env[name] = value
        with open(self.dir / f"node{r}.out", "a") as out, \
                open(self.dir / f"node{r}.err", "a") as err:
            self.procs[r] = subprocess.Popen(
                [launcher(), "--node-rank", str(r), *self.args], env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def out(self, r):
        return (self.dir / f"node{r}.out").read_text()

    def err(self, r):
        return (self.dir / f"node{r}.err").read_text()

    def describe(self):
        return "\n".join(f"--- node {r} (exit {p.poll()}) ---\n{self.out(r)}{self.err(r)}"
                         for r, p in sorted(self.procs.items()))

    def wait(self, timeout=60):
        """Every node's exit code; at the deadline every node gets SIGKILL and the test
        fails with what they printed."""
        deadline = time.monotonic() + timeout
        codes = {}
        try:
            for r, p in sorted(self.procs.items()):
                codes[r] = p.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the join job did not end within {timeout} s\n"
                                 + self.describe()) from None
        return codes

    def kill(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()

    def assert_nothing_left(self, timeout=10):
        wait_until("every process of the job gone",
                   lambda: not processes_with(self.marker), timeout)


def python():
    """The interpreter the ranks run: this one (the one with torch)."""
    return sys.executable
